"""Run shell commands a few at a time, in the order given, each into its own log; fail if any failed.

    python scripts/run_jobs.py --parallel 2 JOBFILE

JOBFILE holds one job per line, `name<TAB>command` (blank lines and lines starting with # are skipped). A job
starts as soon as a slot is free, so with the longest jobs listed first both cores stay busy to the end (CI's
chapters and workshop segments: one long list instead of two fixed bins that finished minutes apart). Each
job's output is printed whole when it ends, with its time; the exit status is 1 if any job failed, and the
failed ones are named last.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def read_jobs(path: Path) -> list[tuple[str, str]]:
    jobs = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, tab, command = line.partition("\t")
        if not tab or not name.strip() or not command.strip():
            raise ValueError(f"{path}:{n}: a job is `name<TAB>command`, got {line!r}")
        jobs.append((name.strip(), command))
    names = [name for name, _ in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: job names must be unique, got {names}")
    return jobs


def run_jobs(jobs: list[tuple[str, str]], parallel: int = 2, out=None) -> list[str]:
    """Run the jobs, `parallel` at a time, in order; -> the names of those that failed."""
    out = out or sys.stdout
    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, got {parallel}")
    failed, running, queue = [], {}, list(jobs)
    while queue or running:
        while queue and len(running) < parallel:
            name, command = queue.pop(0)
            log = tempfile.TemporaryFile("w+", encoding="utf-8")  # gone when closed
            proc = subprocess.Popen(command, shell=True, stdout=log, stderr=subprocess.STDOUT,
                                    executable="/bin/bash")
            running[proc] = (name, log, time.perf_counter())
        time.sleep(0.2)
        for proc in [p for p in running if p.poll() is not None]:
            name, log, start = running.pop(proc)
            log.seek(0)
            status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
            print(f"---- {name}: {status} in {time.perf_counter() - start:.0f} s", file=out)
            print(log.read(), end="", file=out, flush=True)
            log.close()
            if proc.returncode != 0:
                failed.append(name)
    return failed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("jobfile", type=Path)
    p.add_argument("--parallel", type=int, default=2)
    args = p.parse_args(argv)
    start, jobs = time.perf_counter(), read_jobs(args.jobfile)
    failed = run_jobs(jobs, args.parallel)
    print(f"---- {len(jobs)} jobs in {time.perf_counter() - start:.0f} s, "
          + (f"failed: {', '.join(failed)}" if failed else "all passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
