"""scripts/run_jobs.py, the pool CI runs the chapters and the workshop segments in: every job runs, two at a
time, in the order given; a failing job fails the pool and is named; a malformed job file is refused."""
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from run_jobs import read_jobs, run_jobs  # noqa: E402


def test_every_job_runs_two_at_a_time_and_each_log_is_printed_whole(tmp_path, capsys):
    jobs = [(f"j{i}", f"sleep 0.5; echo out{i}; date +%s.%N > {tmp_path}/{i}") for i in range(4)]
    start = time.perf_counter()
    assert run_jobs(jobs, parallel=2) == []
    took = time.perf_counter() - start
    assert 0.9 < took < 1.9  # four half-second jobs, two at a time: two rounds, not one and not four
    out = capsys.readouterr().out
    for i in range(4):
        assert f"---- j{i}: ok" in out and f"out{i}\n" in out
    ends = [float((tmp_path / str(i)).read_text()) for i in range(4)]
    assert max(ends[:2]) < min(ends[2:])  # the first two (the longest, in CI's list) started first


def test_a_failing_job_fails_the_pool_and_the_others_still_run(tmp_path, capsys):
    jobs = [("good", "echo fine"), ("bad", "echo broken; exit 3"), ("after", f"touch {tmp_path}/ran")]
    assert run_jobs(jobs, parallel=2) == ["bad"]
    assert (tmp_path / "ran").exists()
    assert "---- bad: FAILED (exit 3)" in capsys.readouterr().out


def test_the_command_line_exits_1_when_a_job_failed_and_says_which(tmp_path):
    jobfile = tmp_path / "jobs"
    jobfile.write_text("# comment\n\nok\ttrue\nno\tfalse\n")
    out = subprocess.run([sys.executable, str(ROOT / "scripts/run_jobs.py"), str(jobfile)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "failed: no" in out.stdout
    jobfile.write_text("ok\ttrue\n")
    out = subprocess.run([sys.executable, str(ROOT / "scripts/run_jobs.py"), str(jobfile)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "all passed" in out.stdout


@pytest.mark.parametrize("text, problem", [("no tab here\n", "name<TAB>command"),
                                           ("a\ttrue\na\ttrue\n", "unique")])
def test_a_malformed_job_file_is_refused(tmp_path, text, problem):
    path = tmp_path / "jobs"
    path.write_text(text)
    with pytest.raises(ValueError, match=problem):
        read_jobs(path)


# ---- scripts/nbclient_poll.py: kernel messages read in slices, so a missed wake-up costs a second ----

class MissedWakeupSocket:
    """A socket whose message arrived before the poll began, but whose poll sees it only at its timeout (what
    pyzmq's asyncio poll sometimes does after a widget cell, jupyter/nbclient#312); a fresh poll sees it at
    once. has_message=False: nothing ever arrives."""

    def __init__(self, has_message=True):
        self.has_message, self.polls = has_message, []

    async def poll(self, timeout_ms):
        import asyncio
        self.polls.append(timeout_ms)
        if len(self.polls) == 1 or not self.has_message:  # the first poll misses the wake-up
            await asyncio.sleep(timeout_ms / 1000)
        return self.has_message


class Channel:
    def __init__(self, socket):
        self.socket = socket

    async def _recv(self):
        return {"msg": "reply"}


def test_a_missed_wake_up_costs_one_slice_not_the_whole_timeout(monkeypatch):
    import asyncio
    import nbclient_poll
    monkeypatch.setattr(nbclient_poll, "SLICE_S", 0.2)
    start = time.perf_counter()
    assert asyncio.run(nbclient_poll.get_msg_in_slices(Channel(MissedWakeupSocket()), timeout=30)) == \
        {"msg": "reply"}
    assert time.perf_counter() - start < 1  # one slice, not 30 s
    # the unpatched read, one poll as long as the timeout, waits it out (a 1 s timeout here)
    from jupyter_client.channels import AsyncZMQSocketChannel
    plain = AsyncZMQSocketChannel.__dict__["get_msg"]
    if plain is not nbclient_poll.get_msg_in_slices:  # (another test may have installed the patch)
        start = time.perf_counter()
        asyncio.run(plain(Channel(MissedWakeupSocket()), timeout=1))
        assert time.perf_counter() - start >= 0.95


def test_with_no_message_the_sliced_read_raises_empty_when_the_whole_timeout_has_passed(monkeypatch):
    import asyncio
    from queue import Empty
    import nbclient_poll
    monkeypatch.setattr(nbclient_poll, "SLICE_S", 0.2)
    socket, start = MissedWakeupSocket(has_message=False), time.perf_counter()
    with pytest.raises(Empty):
        asyncio.run(nbclient_poll.get_msg_in_slices(Channel(socket), timeout=1))
    assert 0.95 <= time.perf_counter() - start < 1.5 and len(socket.polls) >= 5
