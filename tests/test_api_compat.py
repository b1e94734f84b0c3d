"""Issue 11, the rest of Ray 0.7's public API (tests/mpi_scripts/api_compat*.py):
_remote, argument checks at .remote(), hpc_ray.actor and Checkpointable, ObjectID,
custom serializers, errors()/get_webui_url()/object_transfer_timeline(),
hpc_ray.experimental, run_function_on_all_workers before init(), actor classes,
exit() in tasks and actors, init(num_cpus=0), local mode, profile categories, and a
driver started without mpiexec on PATH."""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

import hpc_ray as ray
from conftest import get_mpiexec

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3)])
def test_api_compat(run, mode, n):
    values = run("api_compat.py", n, mode=mode, timeout=90).assert_ok("api_compat")
    assert values["checkpoint_value_after_restart"] == 3


@pytest.mark.parametrize("mode,n", [("embedded", 1), ("mpiexec", 3)])
def test_num_cpus_zero(run, mode, n):
    values = run("api_compat_zero.py", n, mode=mode, timeout=60).assert_ok("api_compat_zero")
    assert values["cluster_cpus"] == 0


def test_local_mode_num_cpus_zero(run):
    run("api_compat_local.py", 1, mode="plain", timeout=60).assert_ok("api_compat_local")


def _path_without_mpiexec() -> str:
    return os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and not os.path.exists(os.path.join(d, "mpiexec")))


@pytest.mark.parametrize("case", ["found", "missing"])
def test_first_contact_without_mpiexec_on_path(run, case):
    mpi = get_mpiexec()
    if mpi is None or mpi.flavor != "mpich":
        pytest.skip("the spawn-time launcher lookup is MPICH's (singleton init)")
    if case == "found" and not (Path(sys.executable).parent / "mpiexec").exists():
        pytest.skip("no mpiexec beside this interpreter")
    result = run("api_compat_first_contact.py", 2, case, mode="plain", timeout=60,
                 env={"PATH": _path_without_mpiexec()})
    values = result.assert_ok("api_compat_first_contact")
    if case == "missing":
        assert "mpiexec" in values["message"] and "PATH" in values["message"], values
        assert "PMII_singinit" not in result.stderr, result.output()


# --- in-process checks (no runtime needed) ----------------------------------------

def test_remote_with_empty_parentheses_is_rejected():
    with pytest.raises(TypeError, match="parentheses"):
        ray.remote()


class _Callable:
    def __call__(self, x):
        return x


@pytest.mark.parametrize("obj", [functools.partial(max, 1), _Callable()],
                         ids=["partial", "callable instance"])
def test_remote_of_a_callable_that_is_no_function_is_rejected(obj):
    # Ray 0.7's check and words (it was an AttributeError: no '__name__').
    with pytest.raises(TypeError, match="must be applied to either a function or to a class"):
        ray.remote(obj)
    with pytest.raises(TypeError, match="must be applied to either a function or to a class"):
        ray.remote(num_cpus=1)(obj)


def test_typed_remote_of_ray_first_api_sets_the_returns():
    # The Pong example (seed 004): @ray.remote([dict], [dict, float]).
    ray.init(local_mode=True)
    try:
        @ray.remote([dict], [dict, float])
        def gradient(model):
            return {"w": model["w"] + 1}, 2.5

        grad_id, reward_id = gradient.remote({"w": 1})
        assert ray.get([grad_id, reward_id]) == [{"w": 2}, 2.5]
    finally:
        ray.shutdown()


def test_object_ids_from_bytes():
    raw20, raw28 = bytes(range(20)), bytes(range(28))
    assert ray.ObjectID(raw20).binary() == raw20
    assert ray.ObjectRef(raw28).binary() == raw28
    assert ray.ObjectID(raw20) == ray.ObjectID(raw20)
    assert ray.ObjectID.nil().is_nil() and ray.ObjectRef(b"\xff" * 28).is_nil()
    assert not ray.ObjectID.from_random().is_nil()
    with pytest.raises(ValueError, match="20 or 28 bytes"):
        ray.ObjectID(b"12345")
    with pytest.raises(TypeError):
        ray.ObjectID("not bytes")


def test_argument_checks_need_no_runtime():
    @ray.remote
    def f(a, *, key):
        return a

    @ray.remote
    class C:
        def m(self, x, y=1):
            return x

    with pytest.raises(TypeError, match="f\\(\\)"):
        f.remote(1)  # the required keyword is missing
    with pytest.raises(TypeError):
        C.remote(1)  # no __init__: no arguments
    with pytest.raises(ray.exceptions.RayError):
        f.remote(1, key=2)  # arguments fine: now it needs init()


def test_ray_02_arguments_name_their_ray_07_replacements():
    # The 0.2 API section's init(driver_mode=, num_custom_resource=) and
    # @remote(num_custom_resource=, checkpoint_interval=) are gone in 0.7.
    with pytest.raises(TypeError, match=r"driver_mode: use local_mode=True.*"
                                        r"num_custom_resource: use resources="):
        ray.init(driver_mode=2, num_custom_resource=1)
    assert not ray.is_initialized()
    with pytest.raises(ValueError, match="num_custom_resource is gone since 0.7: use resources="):
        ray.remote(num_custom_resource=1)(lambda: 1)
    with pytest.raises(ValueError, match="subclasses hpc_ray.actor.Checkpointable"):
        @ray.remote(checkpoint_interval=5)
        class Counter:
            pass


def test_ray_07_exception_names():
    assert ray.exceptions.RayTimeoutError is ray.exceptions.GetTimeoutError
    assert ray.exceptions.RayWorkerError is ray.exceptions.WorkerCrashedError
    assert ray.exceptions.RayActorError is ray.exceptions.ActorDiedError


def test_webui_url_is_none():
    assert ray.get_webui_url() is None
