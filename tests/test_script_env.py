"""``python -m hpc_ray`` passes the script's changes to ``os.environ`` before
``init()`` to the worker ranks (``runtime/script_env.py``), without MPI: what is
sent, and that a launcher's per-rank variables are neither sent nor overwritten."""
from __future__ import annotations

import os

import pytest

from hpc_ray.runtime import script_env


@pytest.fixture
def env(monkeypatch):
    """An environment for the test to note (``script_env.snapshot()``, in the test:
    pytest changes PYTEST_CURRENT_TEST between a fixture and the test) and change."""
    monkeypatch.setattr(script_env, "_before", None)
    monkeypatch.setenv("KEPT", "same")
    monkeypatch.setenv("CHANGED", "before")
    monkeypatch.setenv("DELETED", "before")
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("SLURM_PROCID", "0")
    return monkeypatch


def test_no_snapshot_sends_nothing(monkeypatch):
    monkeypatch.setattr(script_env, "_before", None)
    monkeypatch.setenv("ANYTHING", "x")
    assert script_env.changes() is None


def test_an_unchanged_environment_sends_nothing(env):
    script_env.snapshot()
    assert script_env.changes() is None


def test_set_changed_and_deleted_variables_are_sent(env):
    script_env.snapshot()
    env.setenv("NEW", "driver")
    env.setenv("CHANGED", "driver")
    env.delenv("DELETED")
    assert script_env.changes() == {"set": {"NEW": "driver", "CHANGED": "driver"},
                                    "unset": ["DELETED"]}


def test_per_rank_launcher_variables_are_not_sent(env):
    script_env.snapshot()
    env.setenv("PMI_RANK", "7")
    env.setenv("MPI_LOCALRANKID", "driver")
    env.delenv("SLURM_PROCID")
    env.setenv("OMPI_COMM_WORLD_RANK", "0")
    assert script_env.changes() is None


def test_apply_sets_and_deletes_but_keeps_per_rank_variables(monkeypatch):
    monkeypatch.setenv("CHANGED", "worker")
    monkeypatch.setenv("DELETED", "worker")
    monkeypatch.setenv("PMI_RANK", "2")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.delenv("NEW", raising=False)
    script_env.apply({"set": {"NEW": "driver", "CHANGED": "driver", "PMI_RANK": "0"},
                      "unset": ["DELETED", "SLURM_LOCALID"]})
    assert os.environ["NEW"] == "driver"
    assert os.environ["CHANGED"] == "driver"
    assert "DELETED" not in os.environ
    assert os.environ["PMI_RANK"] == "2"
    assert os.environ["SLURM_LOCALID"] == "1"
    script_env.apply(None)   # nothing to do


def test_spawning_without_snapshot_sends_changes_since_exec(monkeypatch):
    # A driver that spawns its workers through a running mpiexec: they start with
    # the launcher's environment, so what changed since this process started is sent.
    monkeypatch.setattr(script_env, "_before", None)
    monkeypatch.setenv("HPC_RAY_TEST_SPAWN_NEW", "driver")
    monkeypatch.setenv("UCX_NET_DEVICES", "lo")   # an MPI transport setting: not sent
    sent = script_env.changes(spawning=True)
    assert sent["set"].get("HPC_RAY_TEST_SPAWN_NEW") == "driver"
    assert "UCX_NET_DEVICES" not in sent["set"]
    assert script_env.changes() is None   # not spawning, no snapshot: nothing
