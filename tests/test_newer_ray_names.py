"""A program written for newer Ray (0.8 to 2.x) with ``import hpc_ray as ray``:
what hpc_ray has (``num_returns=0``, ``ray.util.ActorPool``, the exception names
an ``except`` clause may list) works; what it accepts and does not act on
(``runtime_env``, ``max_concurrency``, ``namespace``) warns at the user's line;
a mistyped ``lifetime`` is an error; missing API names its replacement.
The runs are local mode (in this process) and, for the actor pool, real worker
ranks (tests/mpi_scripts/newer_ray_names.py)."""
from __future__ import annotations

import pytest

import hpc_ray as ray


@pytest.fixture
def local():
    ray.init(local_mode=True)
    yield
    ray.shutdown()


def test_num_returns_zero_runs_the_call_and_returns_none(local):
    seen = []

    @ray.remote(num_returns=0)
    def effect(x):
        seen.append(x)
        return x

    @ray.remote
    class Counter:
        def __init__(self):
            self.n = 0

        @ray.method(num_returns=0)
        def inc(self):
            self.n += 1

        def read(self):
            return self.n

    assert effect.remote(1) is None
    assert effect.options(num_returns=0).remote(2) is None
    assert effect._remote(args=[3], num_return_vals=0) is None
    counter = Counter.remote()
    assert counter.inc.remote() is None and counter.inc.options(num_returns=0).remote() is None
    assert ray.get(counter.read.remote()) == 2 and seen == [1, 2, 3]
    with pytest.raises(ValueError, match="num_returns must be an int >= 0"):
        ray.remote(num_returns=-1)(lambda: 1)


def test_options_without_effect_warn_and_a_mistyped_lifetime_is_an_error():
    with pytest.warns(UserWarning, match="runtime_env=.* has no effect in hpc_ray") as record:
        ray.remote(runtime_env={"env_vars": {"A": "1"}})(lambda: 1)
    assert record[0].filename == __file__
    with pytest.warns(UserWarning, match="max_concurrency=4 for Threaded .* one call at a time"):
        @ray.remote(max_concurrency=4)
        class Threaded:
            pass
    with pytest.warns(UserWarning, match="namespace='team' .* has no effect"):
        Threaded.options(namespace="team")
    with pytest.raises(ValueError, match="lifetime .* got 'detatched'"):
        Threaded.options(lifetime="detatched")


def test_init_namespace_and_runtime_env_warn(recwarn):
    ray.init(local_mode=True, namespace="app", runtime_env={"pip": ["nothing"]})
    try:
        texts = [str(w.message) for w in recwarn]
        assert any(t.startswith("init(namespace='app') has no effect") for t in texts), texts
        assert any(t.startswith("init(runtime_env=") for t in texts), texts
        assert all(w.filename == __file__ for w in recwarn)
    finally:
        ray.shutdown()


def test_newer_exception_names_can_be_caught_and_newer_api_names_its_replacement():
    # An except clause naming them is evaluated only when an error arrives.
    try:
        raise ray.exceptions.RayTaskError("f", "tb", 0, "host", KeyError("k"))
    except (ray.exceptions.ObjectLostError, ray.exceptions.OutOfMemoryError,
            ray.exceptions.TaskCancelledError, ray.exceptions.OwnerDiedError):
        pytest.fail("caught by the wrong clause")
    except ray.exceptions.RayTaskError as err:
        assert isinstance(err.cause, KeyError)
    assert issubclass(ray.exceptions.ObjectLostError, ray.exceptions.UnreconstructableError)
    assert issubclass(ray.exceptions.NodeDiedError, ray.exceptions.RayError)
    with pytest.raises(AttributeError, match="cancel .*not provided: a task runs to its end"):
        ray.cancel
    with pytest.raises(AttributeError, match="util.queue .*not provided"):
        ray.util.queue


@pytest.mark.mpi
@pytest.mark.parametrize("mode", ["embedded", "mpiexec"])
def test_actor_pool_on_worker_ranks(run, mode):
    values = run("newer_ray_names.py", 3, mode=mode, timeout=60).assert_ok("newer_ray_names")
    assert values["ordered"] == [2 * v for v in range(12)]
