"""Issue 36, core part: actor checkpoints and reconstruction, signals read by
several tasks, and a task's output ahead of its result
(tests/mpi_scripts/core_api07_faults.py; the processes are really killed)."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.mpi


def _printed_before(stdout: str, tag: str, n: int) -> None:
    """All ``n`` lines and the LAST line of ``tag`` come before ``RESULT got_<tag>``."""
    lines = stdout.splitlines()
    got = lines.index(f"RESULT got_{tag}=true")
    worker = re.compile(r"^\(pid=\d+, rank=\d+\) " + re.escape(tag) + r" (line \d+|LAST)$")
    before = [ln.split(") ", 1)[1] for ln in lines[:got] if worker.match(ln)]
    assert before == [f"{tag} line {i}" for i in range(n)] + [f"{tag} LAST"], (
        f"{tag}: {len(before)} of {n + 1} lines before get returned")


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3)])
def test_core_api07_faults(run, mode, n):
    result = run("core_api07_faults.py", n, mode=mode, timeout=120)
    values = result.assert_ok("core_api07_faults")
    assert values["checkpoint_balance"] == 17
    assert values["checkpoint_errors"] == 2
    assert values["never_starts_signals"] == 1
    # The crash's lost call (an ActorDiedSignal) and the failed reconstruction.
    assert values["fails_on_restart_signals"] == 2
    assert values["task_readers"] == [[0, 1, 2]] * 6
    for tag, count in (("small", 1), ("flood", 3000), ("actor0", 200), ("actor1", 200),
                       ("actor2", 200)):
        _printed_before(result.stdout, tag, count)
