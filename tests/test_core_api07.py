"""Issue 36, core part: Ray 0.7 behaviours that live outside the runtime.

- tests/mpi_scripts/core_api07.py: global-state calls after shutdown(), remote
  functions and actor classes across shutdown()/init(), _remote(num_return_vals=0),
  subclassing an actor class, actors ended on purpose and errors().
- The distributed-training page's import path, ray.experimental.sgd.pytorch.utils.
"""
from __future__ import annotations

import importlib.util
import inspect

import pytest


@pytest.mark.mpi
def test_core_api07(run):
    values = run("core_api07.py", 2, mode="embedded", timeout=60).assert_ok("core_api07")
    assert values["state_error"].endswith("ray.init has been called.")
    assert "Inheriting from actor classes is not currently supported" in values["subclass_error"]


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_signals_and_errors_past_the_history_budget(run, mode):
    result = run("history_budget.py", 3, mode=mode, timeout=90,
                 env={"HPC_RAY_HEAD_HISTORY_BYTES": str(1 << 20)})
    values = result.assert_ok("history_budget")
    assert values["heard"] == 400
    assert 0 < values["errors_listed"] < 1600   # what the history keeps


def test_state_calls_before_init_say_to_call_init():
    import hpc_ray as ray

    with pytest.raises(ray.exceptions.RayError, match=r"ray.init has been called\.$"):
        ray.objects()


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_docs_sgd_utils_import_path():
    import torch

    from hpc_ray.experimental.sgd.pytorch import PyTorchTrainer, utils
    from hpc_ray.experimental.sgd.pytorch.utils import sgd_mse_optimizer, train, validate

    default = inspect.signature(PyTorchTrainer).parameters["optimizer_creator"].default
    assert default is utils.sgd_mse_optimizer is sgd_mse_optimizer
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    criterion, optimizer = sgd_mse_optimizer(model, {"lr": 0.1})
    x = torch.linspace(-1, 1, 32).unsqueeze(1)
    batches = [(x[i:i + 8], 3 * x[i:i + 8]) for i in range(0, 32, 8)]
    first = validate(batches, model, criterion)["validation_loss"]
    for _ in range(20):
        stats = train(batches, model, criterion, optimizer)
    assert stats["batch_processed"] == 32
    assert validate(batches, model, criterion)["validation_loss"] < first / 10


def test_a_second_session_makes_no_id_of_the_first():
    # A driver's ids are (rank 0, serial 0, counter): a counter that started again
    # at init() made the first session's ids again, so a handle of that session
    # dropped in the next could end a new actor (the helper's reproduction:
    # ``class A`` reassigned after a re-init).
    from hpc_ray.runtime import context

    context.set_id_prefix(0, 0)
    first = context.new_ids(3)
    context.set_id_prefix(0, 0)          # what the next init() does
    assert context.new_ids(1) >= first + 3


@pytest.mark.mpi
def test_waits_in_other_threads_end_at_shutdown(run):
    # A thread pool's get()s waited for good once another thread called
    # shutdown(), and the program never exited (its threads are joined).
    # (One mode: the driver's waits are the same under mpiexec.)
    run("shutdown_waiters.py", 3, mode="embedded", timeout=60).assert_ok("shutdown_waiters")
