"""Time every code cell of a chapter, as CI runs it: quick mode, one thread, the same cell timeout.

    python scripts/cell_times.py book/02_draft_and_verify.ipynb [--full] [--busy N] [--json times.json]

Executes the notebook in memory with nbclient (nothing is written back to it) and prints each code cell's
time, the total, and the slowest cell with the headroom CI leaves it: the cell timeout of scripts/test.sh
divided by that cell's time (the book asks for at least 3x). --busy N starts N CPU-bound processes for the
duration of the run, to time the chapter on a machine that is doing something else too.

Two times per cell: `seconds`, the kernel's own, from the moment it starts the cell to its reply (the
timestamps the kernel puts on its messages), and `wall_s`, from the request to the moment nbclient has the
reply. They differ when nbclient sits out a whole cell timeout after a widget cell although the kernel
replied long before (jupyter/nbclient#312): such a cell is listed as a stall, and the headroom is computed
from the kernel's times.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
HEADROOM = 3.0  # a cell should finish in a third of its timeout or less
STALL_S = 10.0  # wall time this much above the kernel's own time: nbclient waited, not the cell


def ci_cell_timeout(quick: bool = True, test_sh: Path = ROOT / "scripts" / "test.sh") -> int:
    """The per-cell timeout scripts/test.sh gives nbmake: `cell_timeout=$(... && echo FULL || echo QUICK)`."""
    m = re.search(r"cell_timeout=\$\(.*?echo (\d+) \|\| echo (\d+)\)", test_sh.read_text())
    if m is None:
        raise ValueError(f"no `cell_timeout=$(... echo FULL || echo QUICK)` line in {test_sh}; "
                         "pass --timeout")
    return int(m.group(2) if quick else m.group(1))


class TimedClient(NotebookClient):
    """A NotebookClient that records each code cell's wall time, from the execute request to its reply."""

    def __init__(self, nb, **kwargs):
        super().__init__(nb, on_cell_execute=self._start, on_cell_executed=self._stop, **kwargs)
        self.seconds: dict[int, float] = {}
        self._t0 = 0.0

    def _start(self, cell, cell_index: int) -> None:
        self._t0 = time.perf_counter()

    def _stop(self, cell, cell_index: int, execute_reply) -> None:
        self.seconds[cell_index] = time.perf_counter() - self._t0


def kernel_seconds(cell, wall: float) -> float:
    """The kernel's own time for an executed cell: its reply's timestamp minus its busy status's
    (else `wall`)."""
    stamps = cell.get("metadata", {}).get("execution", {})
    try:
        start, end = (datetime.fromisoformat(stamps[k].replace("Z", "+00:00"))
                      for k in ("iopub.status.busy", "shell.execute_reply"))
    except (KeyError, ValueError):
        return wall
    return max((end - start).total_seconds(), 0.0)


def _spin() -> None:
    while True:
        pass


def time_cells(path: Path, *, quick: bool = True, timeout: int, threads: int = 1, busy: int = 0) -> dict:
    """Execute `path` and return
    {notebook, quick, timeout_s, total_s, cells: [{index, seconds, first_line}]}."""
    nb = nbformat.read(path, as_version=4)
    # the kernel inherits these, as under test.sh
    os.environ.update(SPECDEC_QUICK="1" if quick else "0", OMP_NUM_THREADS=str(threads),
                      HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(busy)]
    for p in spinners:
        p.start()
    client = TimedClient(nb, timeout=timeout, kernel_name="python3",
                         resources={"metadata": {"path": str(path.resolve().parent)}})
    start = time.perf_counter()
    try:
        client.execute()
    finally:
        for p in spinners:  # only the processes started here
            p.terminate()
            p.join()
    cells = [{"index": i, "seconds": round(kernel_seconds(nb.cells[i], wall), 2), "wall_s": round(wall, 2),
              "first_line": (nb.cells[i].source.splitlines() or [""])[0][:70]}
             for i, wall in sorted(client.seconds.items())]
    return {"notebook": str(path), "quick": quick, "threads": threads, "busy": busy, "timeout_s": timeout,
            "total_s": round(time.perf_counter() - start, 1), "cells": cells}


def summary(result: dict) -> dict:
    """The slowest cell and its headroom: timeout / seconds."""
    slowest = max(result["cells"], key=lambda c: c["seconds"])
    headroom = result["timeout_s"] / max(slowest["seconds"], 1e-9)
    return {**slowest, "headroom": round(headroom, 1), "enough": headroom >= HEADROOM}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--full", action="store_true",
                        help="full mode (SPECDEC_QUICK=0) instead of quick mode")
    parser.add_argument("--timeout", type=int, default=None,
                        help="cell timeout in s (default: scripts/test.sh's)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS for the kernel (CI: 1)")
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes to run alongside")
    parser.add_argument("--json", type=Path, default=None, help="also write the times here")
    parser.add_argument("--top", type=int, default=10, help="cells to list, slowest first (0: all, in order)")
    args = parser.parse_args(argv)
    timeout = args.timeout or ci_cell_timeout(quick=not args.full)
    result = time_cells(args.notebook, quick=not args.full, timeout=timeout, threads=args.threads,
                        busy=args.busy)
    result["slowest"] = slow = summary(result)
    listed = sorted(result["cells"], key=lambda c: -c["seconds"])[:args.top] if args.top else result["cells"]
    print(f"{args.notebook.name}: {'full' if args.full else 'quick'} mode, {args.threads} thread(s), "
          f"{args.busy} busy process(es), cell timeout {timeout} s")
    for c in listed:
        print(f"  cell {c['index']:3d} {c['seconds']:8.1f} s  {c['first_line']}")
    stalls = [c for c in result["cells"] if c["wall_s"] - c["seconds"] > STALL_S]
    result["stalls"] = [c["index"] for c in stalls]
    for c in stalls:
        print(f"  stall after cell {c['index']}: nbclient waited {c['wall_s']:.1f} s for a reply "
              f"the kernel sent after {c['seconds']:.1f} s (jupyter/nbclient#312)")
    print(f"total {result['total_s']:.1f} s wall over {len(result['cells'])} code cells, "
          f"{sum(c['seconds'] for c in result['cells']):.1f} s in the kernel; slowest: cell {slow['index']}, "
          f"{slow['seconds']:.1f} s, headroom {slow['headroom']:.1f}x of the {timeout} s timeout "
          f"({'at least' if slow['enough'] else 'LESS than'} {HEADROOM:g}x)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
