"""``runtime/strays``: the processes a rank's tasks left running are found by the
mark in their environment and ended, a process that ignores SIGTERM included;
others (no mark, another rank's mark) are left alone. (End to end, under
mpiexec and embedded: ``executor_semantics.py``'s "processes tasks leave behind".)"""
from __future__ import annotations

import os
import subprocess
import time

import psutil

from hpc_ray.runtime import strays


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _start(mark: str | None, script: str) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop(strays.MARK, None)
    if mark is not None:
        env[strays.MARK] = mark
    return subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE, text=True)


def test_marked_processes_end_and_others_stay():
    mark = f"test-{os.getpid()}/rank1"
    # A shell that ignores SIGTERM, its child, and an orphan whose shell has exited.
    stubborn = _start(mark, "trap '' TERM; sleep 300 & echo $!; wait")
    orphan = _start(mark, "sleep 300 >/dev/null 2>&1 & echo $!")
    other_rank = _start(f"test-{os.getpid()}/rank10", "exec sleep 300")
    unmarked = _start(None, "exec sleep 300")
    child = int(stubborn.stdout.readline())
    orphan_pid = int(orphan.stdout.readline())
    orphan.wait(10)
    try:
        found = strays.end(mark)
        assert sorted(found) == sorted([stubborn.pid, child, orphan_pid])
        assert stubborn.wait(10) == -9           # SIGTERM ignored: killed after the grace
        deadline = time.monotonic() + 10
        while (_running(child) or _running(orphan_pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(child) and not _running(orphan_pid)
        assert other_rank.poll() is None and unmarked.poll() is None
        assert strays.end(mark) == []
    finally:
        for p in (stubborn, orphan, other_rank, unmarked):
            p.kill()
            p.wait()
            p.stdout.close()
        for pid in (child, orphan_pid):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
