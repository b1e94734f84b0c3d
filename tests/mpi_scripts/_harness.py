"""Helpers shared by the rank scripts in this folder.

``tests/conftest.py:run_mpi`` tells a script how it was launched through
environment variables:

    HPC_RAY_TEST_MODE         embedded | mpiexec | module | spawned | plain
    HPC_RAY_TEST_NP           total ranks (driver included)
    HPC_RAY_TEST_NUM_WORKERS  worker ranks (NP - 1)
    HPC_RAY_TEST_TIMEOUT      the launch's timeout in seconds
    HPC_RAY_TEST_TMPDIR       a private directory for marker files

Nothing here is used inside a task: tasks are defined in the scripts
themselves, so cloudpickle ships them by value.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback

MODE = os.environ.get("HPC_RAY_TEST_MODE", "embedded")
NP = int(os.environ.get("HPC_RAY_TEST_NP", "3"))
NUM_WORKERS = int(os.environ.get("HPC_RAY_TEST_NUM_WORKERS", str(max(NP - 1, 0))))
TIMEOUT = float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60"))
TMPDIR = os.environ.get("HPC_RAY_TEST_TMPDIR") or os.getcwd()


def init_kwargs(**extra) -> dict:
    """Arguments for ``hpc_ray.init()``: embedded (and spawned) mode spawns NUM_WORKERS ranks."""
    kwargs = dict(extra)
    if MODE in ("embedded", "spawned"):
        kwargs.setdefault("num_cpus", NUM_WORKERS)
    return kwargs


def _line(text: str) -> None:
    """Write one whole line: ``print`` writes the text and its newline separately,
    and the comm thread's lines of worker output (log_to_driver) can land between."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def report(key: str, value) -> None:
    """Print a ``RESULT key=<json>`` line for the test to check."""
    _line(f"RESULT {key}={json.dumps(value)}")


#: Failed checks so far. A script reports every failure it meets, not only the
#: first: a check records and goes on, a ``section`` catches what escapes it.
FAILURES: list[str] = []


def _where(depth: int = 2) -> str:
    frame = sys._getframe(depth)
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def check(cond, message="") -> bool:
    """Record a failure (with the caller's line) unless ``cond``; survives ``python -O``."""
    if not cond:
        text = f"CHECK FAILED at {_where()}: {message!s}"[:3000]
        FAILURES.append(text)
        log(text)
    return bool(cond)


def expect_raises(exc_types, fn, *args, **kwargs):
    """Call ``fn`` and return the exception it raised; record a failure if it
    returned (or raised something else) and return that exception or None."""
    try:
        value = fn(*args, **kwargs)
    except exc_types as err:
        return err
    except Exception as err:
        check(False, f"{getattr(fn, '__name__', fn)} raised {err!r}, expected {exc_types}")
        return err
    text = f"CHECK FAILED at {_where()}: {getattr(fn, '__name__', fn)} returned {value!r}, " \
           f"expected {exc_types}"
    FAILURES.append(text[:3000])
    log(text[:3000])
    return None


@contextlib.contextmanager
def section(name: str):
    """Run a block; an exception escaping it is recorded, and the script goes on."""
    try:
        yield
    except Exception as err:
        text = f"SECTION FAILED {name}: {err!r}"[:500] + "\n" + traceback.format_exc()
        FAILURES.append(text[:5000])
        log(text[:5000])


def ok(name: str) -> None:
    """Print ``OK <name>`` if every check passed; otherwise list them and exit 1."""
    if FAILURES:
        log(f"{len(FAILURES)} check(s) failed in {name}:")
        for text in FAILURES:
            log("  - " + text.splitlines()[0])
        sys.stdout.flush()
        sys.exit(1)
    _line(f"OK {name}")


def poll_for(pred, timeout: float, period: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(period)
        period = min(period * 1.5, 0.2)


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def executor_pids(parent_pid: int) -> set[int]:
    """Pids of the live hpc_ray executors among a rank's children.

    A child that has exited but is not yet reaped (a zombie) or that is gone
    between the listing and the look at its command line is not counted:
    checks that wait for an executor to end poll this while it dies.
    """
    import psutil

    pids = set()
    try:
        children = psutil.Process(parent_pid).children()
    except psutil.NoSuchProcess:
        return pids
    for child in children:
        try:
            if (child.status() != psutil.STATUS_ZOMBIE
                    and "hpc_ray.runtime.executor" in " ".join(child.cmdline())):
                pids.add(child.pid)
        except psutil.Error:   # ZombieProcess, NoSuchProcess, AccessDenied
            continue
    return pids


def tmp_path(name: str) -> str:
    return os.path.join(TMPDIR, name)


def mark_started(name: str) -> None:
    """Say, in TMPDIR, that one more task of ``name`` has started (``started``)."""
    open(tmp_path(f"started-{name}-{os.getpid()}-{os.urandom(6).hex()}"), "w").close()


def started(name: str) -> int:
    """How many tasks of ``name`` have started (``mark_started``)."""
    return sum(f.startswith(f"started-{name}-") for f in os.listdir(TMPDIR))


def started_before_release(gate, name: str, n: int, **options):
    """Submit ``n`` tasks of ``gate`` (a remote function of ``(name, release)``
    that calls ``mark_started(name)``, then waits for the file ``release``);
    return how many started before the release (once no more start within a
    second) and what they return."""
    import hpc_ray as ray
    release = tmp_path(f"release-{name}")
    refs = [gate.options(**options).remote(name, release) for _ in range(n)]
    poll_for(lambda: started(name) >= n - 1, 60)
    ray.wait(refs, timeout=1)
    before = started(name)
    open(release, "w").close()
    return before, ray.get(refs, timeout=60)


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)
