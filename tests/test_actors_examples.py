"""Issue 4 examples: the parameter server (sync and async, softmax regression on
scikit-learn's digits) and the shared-memory replay buffer filled by explorer
tasks (cpprb + gymnasium), each in embedded mode and under
``mpiexec -n 3 python -m hpc_ray``."""
from __future__ import annotations

import re

import pytest

from conftest import REPO_ROOT, run_mpi

pytestmark = pytest.mark.mpi

EXAMPLES = REPO_ROOT / "examples"


@pytest.mark.parametrize("mode", ["embedded", "module"])
def test_parameter_server(mode):
    pytest.importorskip("sklearn")
    result = run_mpi(EXAMPLES / "parameter_server.py", 3, "--quick", mode=mode, timeout=120)
    final = dict(re.findall(r"^(sync|async)\s+parameter server: final test accuracy ([0-9.]+)",
                            result.stdout, re.M))
    assert set(final) == {"sync", "async"}, result.output()
    for kind, accuracy in final.items():
        assert float(accuracy) > 0.85, (kind, result.output())
    # It prints its progress while it trains.
    assert len(re.findall(r"^sync\s+iteration", result.stdout, re.M)) >= 3, result.output()
    assert re.search(r"^async\s+\d+/\d+ updates", result.stdout, re.M), result.output()


@pytest.mark.parametrize("mode", ["embedded", "module"])
def test_replay_buffer(mode):
    pytest.importorskip("cpprb")
    pytest.importorskip("gymnasium")
    result = run_mpi(EXAMPLES / "replay_buffer.py", 3, "--quick", mode=mode, timeout=120)
    lines = result.stdout.splitlines()
    for marker in ("Start 2 explorers", "Start warmup", "Finish training"):
        assert marker in lines, result.output()
    found = re.search(r"explorers: (\d+) steps, (\d+) episodes; buffer: (\d+) transitions",
                      result.stdout)
    assert found, result.output()
    steps, episodes, stored = map(int, found.groups())
    assert stored >= 500 and steps >= stored and episodes > 0, found.group(0)
    assert "resource_tracker" not in result.stderr, result.output()


def test_replay_buffer_without_its_packages(tmp_path):
    """Without cpprb the example says what to install and exits with status 2."""
    (tmp_path / "cpprb.py").write_text("raise ImportError('No module named cpprb (test)')\n")
    result = run_mpi(EXAMPLES / "replay_buffer.py", 1, mode="plain", timeout=60,
                     expect_rc=2, env={"PYTHONPATH": f"{tmp_path}:{REPO_ROOT}"})
    assert "pip install cpprb gymnasium" in result.stderr, result.output()
