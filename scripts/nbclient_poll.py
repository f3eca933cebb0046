"""Headless notebook runs without the widget stall: kernel messages read in slices of a second at most.

nbclient waits for a cell's reply with one `poll` of the kernel's shell socket, as long as the cell's
timeout. After a cell that shows a widget (chapters 4 and 6 do), pyzmq's asyncio poll sometimes misses the
wake-up for a reply that has already arrived (jupyter/nbclient#312), and finds it only when the timeout
fires: the run passes, 300 s late (chapter 6's batching segment took 341 s instead of 39). A new poll checks
the socket at once, so reading in slices of at most `SLICE_S` seconds bounds the stall at a second and
changes nothing else: a message is returned as soon as a slice sees it, and `Empty` is raised only when the
whole timeout has passed, as before.

    import nbclient_poll; nbclient_poll.install()   # in-process (the `nbclient` fixture in tests/conftest.py)
    python scripts/nbclient_poll.py --nbmake ...     # pytest with it installed (scripts/test.sh's chapters)
"""
from __future__ import annotations

import time
from queue import Empty

SLICE_S = 1.0


async def get_msg_in_slices(self, timeout: float | None = None) -> dict:
    """jupyter_client's `AsyncZMQSocketChannel.get_msg`, polling at most SLICE_S seconds at a time."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = SLICE_S if deadline is None else min(SLICE_S, max(0.0, deadline - time.monotonic()))
        if await self.socket.poll(int(left * 1000)):
            return await self._recv()
        if deadline is not None and time.monotonic() >= deadline:
            raise Empty


def install() -> None:
    from jupyter_client.channels import AsyncZMQSocketChannel
    AsyncZMQSocketChannel.get_msg = get_msg_in_slices


if __name__ == "__main__":  # python scripts/nbclient_poll.py <pytest arguments>: pytest, the patch installed
    import sys

    import pytest
    install()
    sys.exit(pytest.main(sys.argv[1:]))
