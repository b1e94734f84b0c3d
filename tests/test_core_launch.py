"""Issue 3: every way of starting a job runs the same driver script.

    python driver.py                          embedded: init() spawns the workers
    mpiexec -n N python driver.py             ranks 1..N-1 serve inside init()
    mpiexec -n N python -m hpc_ray driver.py  only rank 0 runs the script
    hpc-ray run -n N driver.py                the CLI picks the mpiexec flags
    init(local_mode=True)                     tasks run serially in the driver
"""
from __future__ import annotations

import importlib.util
import os
import shlex
import subprocess
import sys

import pytest

from conftest import MODES, NONZERO, REPO_ROOT, SCRIPTS_DIR, get_mpiexec, run_mpi

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("mode", MODES)
def test_launch_modes(run, mode, n):
    result = run("launch_basic.py", n, "alpha", "--beta=1", mode=mode, timeout=90)
    values = result.assert_ok("launch_basic")
    workers = n - 1
    # Ranks 1..N-1 run the script up to init() under plain mpiexec and never
    # return from it; under `python -m hpc_ray` they never run it at all.
    # (Counted as substrings: mpiexec may join lines of different ranks.)
    before = result.stdout.count("BEFORE_INIT")
    assert before == (n if mode == "mpiexec" else 1), result.output()
    assert result.stdout.count("AFTER_INIT") == 1, result.output()
    assert result.stdout.count("OK launch_basic") == 1
    assert values["argv"] == ["alpha", "--beta=1"]
    assert values["argv0"] == "launch_basic.py"
    assert values["reinit_error"]
    assert values["concurrent_workers"] == workers
    assert 1 <= values["distinct_pids_many_tasks"] <= workers
    assert values["cluster_cpus"] == workers


def test_embedded_default_num_cpus(run):
    # init() with no launcher and no num_cpus: one worker per core.
    result = run("default_init.py", 1, mode="plain", timeout=90)
    values = result.assert_ok("default_init")
    assert values["cluster_cpus"] == os.cpu_count()
    assert values["squares"] == [0, 1, 4, 9, 16]


def test_mpiexec_single_rank(run):
    """mpiexec -n 1 leaves no worker ranks: init() then behaves as in embedded
    mode and spawns one worker per core, so the same script still runs."""
    result = run("default_init.py", 1, mode="mpiexec", timeout=60)
    values = result.assert_ok("default_init")
    assert values["squares"] == [0, 1, 4, 9, 16]
    assert values["cluster_cpus"] == os.cpu_count()


def test_local_mode(run):
    result = run("local_mode.py", 1, mode="plain", timeout=60)
    values = result.assert_ok("local_mode")
    assert values["children_after_init"] == 0
    assert result.stdout.count("LOCAL BODY RAN") == 1


@pytest.mark.parametrize("mode", ["mpiexec", "module"])
@pytest.mark.parametrize("then_init", [False, True])
def test_local_mode_under_a_launcher(run, mode, then_init):
    # Only rank 0 runs the script in local mode; the other ranks wait for a
    # session that a later init() starts, or leave when the script ends.
    args = ("then-init",) if then_init else ()
    result = run("local_mode.py", 3, *args, mode=mode, timeout=60)
    values = result.assert_ok("local_mode")
    assert result.stdout.count("LOCAL BODY RAN") == 1, result.output()
    if then_init:
        assert values["task_pids_after_local"] >= 1


@pytest.mark.faults
@pytest.mark.parametrize("mode", MODES)
def test_driver_exits_without_shutdown(run, mode):
    # The abandoned tasks sleep an hour: the job must end without them, and
    # rc 0 (no rank may fail because the driver left without saying goodbye).
    result = run("driver_exit.py", 3, "noshutdown", mode=mode, timeout=30)
    result.assert_ok("driver_exit noshutdown")


@pytest.mark.faults
@pytest.mark.parametrize("mode,how", [
    ("mpiexec", "exit3"),
    ("mpiexec", "sigkill"),
    ("module", "exit3"),
    ("module", "raise"),
    ("embedded", "exit3"),
    ("embedded", "sigkill"),
])
def test_driver_dies(run, mode, how):
    # The driver is gone mid-job: mpiexec (or the spawned workers) must notice
    # and end promptly; run_mpi checks no process of the launch survives it,
    # and the autouse fixture that nothing is left in /dev/shm.
    result = run("driver_exit.py", 3, how, mode=mode, timeout=30, expect_rc=NONZERO)
    assert f"OK driver_exit {how}" in result.stdout, result.output()
    if how == "raise":
        assert "the driver failed" in result.stderr, result.output()


@pytest.mark.faults
@pytest.mark.parametrize("mode,how,rc", [
    ("module", "end", 0),
    ("module", "help", 0),
    ("module", "exit3", 3),
    ("module", "raise", 1),
    ("module", "bad-init", 1),
    ("mpiexec", "bad-init", 1),
    ("module", "bad-store", 1),
    ("mpiexec", "bad-resource", 1),
    ("module", "no-room", 1),
    ("embedded", "no-room", 1),
])
def test_script_ends_without_a_session(run, mode, how, rc):
    # Only rank 0 runs the script; it ends without starting a session (it never
    # calls init(), or init() fails, before the worker ranks hear of one or in
    # the set-up with them). The
    # ranks waiting for the session must leave, and the job end with the
    # script's own status instead of waiting until it is killed.
    result = run("no_init.py", 3, how, mode=mode, timeout=30, expect_rc=rc,
                 env={"CUDA_VISIBLE_DEVICES": "0"})
    assert result.stdout.count(f"NO_INIT {how}") == (3 if mode == "mpiexec" else 1), \
        result.output()
    if how == "help":
        assert "a script's own help" in result.stdout, result.output()
    if how == "raise":
        assert "RuntimeError: the script failed before init()" in result.stderr, result.output()
    if how == "bad-init":
        assert "ValueError: init(num_gpus=2) but CUDA_VISIBLE_DEVICES='0'" in result.stderr, \
            result.output()
    if how == "bad-store":
        assert "ValueError: object_store_memory must be a number of bytes above 0, got '1GB'" \
            in result.stderr, result.output()
    if how == "bad-resource":
        assert "ValueError: resources={'R': 'x'}: a resource's amount must be a number" \
            in result.stderr, result.output()
    if how == "no-room":
        # (The worker ranks had joined the set-up: they are ended, not let go.)
        assert "OSError: [Errno 12] Cannot allocate memory" in result.stderr, result.output()


@pytest.mark.parametrize("mode", MODES + ("spawned",))
def test_driver_environ_reaches_tasks_and_actors(run, mode):
    # What the script sets or deletes in os.environ before init() is what its
    # tasks and actors see, in every mode (python -m hpc_ray: the worker ranks
    # never ran the script; spawned through a running mpiexec, they started with
    # the launcher's environment: both get the changes with the session's config).
    result = run("driver_environ.py", 3, mode=mode, timeout=60,
                 env={"HPC_RAY_TEST_ENV_CHANGED": "launcher",
                      "HPC_RAY_TEST_ENV_DELETED": "launcher"})
    values = result.assert_ok("driver_environ")
    assert values["task_env"]["MY_SETTING"] == "from-driver"
    assert values["actor_env_in_rank_True"]["HPC_RAY_TEST_ENV_DELETED"] is None


@pytest.mark.parametrize("how", ["-m", "-c", "-"])
def test_module_mode_takes_a_module_a_command_or_stdin(run, how):
    # What python (and python -m mpi4py.futures) take: a module on sys.path (the
    # rank scripts' folder is), a command, or the program on standard input.
    script = SCRIPTS_DIR / "launch_basic.py"
    source = {"-m": ["-m", "launch_basic"],
              "-c": ["-c", f"exec(compile(open({str(script)!r}).read(), 'launch_basic', 'exec'))"],
              "-": ["-"]}[how]
    mpi = get_mpiexec()
    if mpi is None:
        pytest.skip("no mpiexec found")
    argv = [*mpi.command(3), sys.executable, "-m", "hpc_ray", *source,
            "alpha", "--beta=1"]
    cmd = argv if how != "-" else ["bash", "-c", f"{shlex.join(argv)} < {shlex.quote(str(script))}"]
    result = run("launch_basic.py", 3, mode="module", cmd=cmd, timeout=90)
    values = result.assert_ok("launch_basic")
    assert result.stdout.count("BEFORE_INIT") == 1, result.output()
    assert values["argv"] == ["alpha", "--beta=1"]
    assert values["argv0"] == {"-m": "launch_basic.py", "-c": "-c", "-": "-"}[how]
    assert values["concurrent_workers"] == 2


def test_rank_0_says_what_keeps_ranks_that_do_not_come_to_init(run):
    # A rank 0 alone in init() (`if rank == 0: ray.init()`) waited with no word.
    result = run("late_ranks.py", 3, mode="mpiexec", timeout=60)
    result.assert_ok("late_ranks")
    assert result.stderr.count("hpc_ray: init() on rank 0 has waited 1 s for the other 2 "
                               "rank(s) of the launch to call init() too.") == 1, result.output()
    assert "`if rank == 0: ray.init()` waits here for good" in result.stderr, result.output()


def test_module_mode_help_is_asked_for_not_an_error():
    import subprocess
    for flag in ("--help", "-h"):
        proc = subprocess.run([sys.executable, "-m", "hpc_ray", flag], capture_output=True,
                              text=True, timeout=60)
        assert (proc.returncode, proc.stdout.split(":")[0]) == (0, "usage"), proc
    proc = subprocess.run([sys.executable, "-m", "hpc_ray"], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stderr.split(":")[0]) == (2, "usage"), proc


@pytest.mark.parametrize("mode", ["mpiexec", "module", "embedded"])
def test_a_drivers_child_that_starts_a_session_is_a_driver_of_its_own(run, mode):
    # The child inherits the rank's launcher variables: taken for a rank of the
    # launch, its MPI_Init aborted (a pool replaced its dead workers for ever).
    result = run("child_driver.py", 3, mode=mode, timeout=120)
    values = result.assert_ok("child_driver")
    assert values["pool"] == [9, 16]
    assert "PMI_Init returned" not in result.output(), result.output()


def test_launcher_variables_inherited_from_a_rank_are_not_a_launch(tmp_path):
    # What a process sees with a rank's variables: its own (a launcher process
    # stands between it and the rank: a launch started below it) or inherited.
    ask = "from hpc_ray.runtime import launched; print(launched.under_launcher())"
    sibling = subprocess.Popen(["sleep", "30"])
    fake_launcher = tmp_path / "mpiexec-of-a-test"
    fake_launcher.symlink_to(sys.executable)
    try:
        def under_launcher(marked_pid, through=None):
            env = {**os.environ, "PMI_RANK": "0", "HPC_RAY_LAUNCHED_PID": str(marked_pid)}
            cmd = [sys.executable, "-c", ask]
            if through is not None:   # a python named as a launcher, which runs cmd
                cmd = [through, "-c", f"import subprocess, sys; "
                                      f"sys.exit(subprocess.run({cmd!r}).returncode)"]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            return out.stdout.strip()

        assert under_launcher(os.getpid()) == "False"          # a child of the rank
        assert under_launcher(os.getpid(), str(fake_launcher)) == "True"
        assert under_launcher(sibling.pid) == "True"           # not its rank's descendant
    finally:
        sibling.kill()
        sibling.wait()


def test_hpc_ray_run_cli(run):
    if importlib.util.find_spec("hpc_ray.cli") is None and not (
            REPO_ROOT / "hpc_ray" / "cli.py").exists():
        pytest.skip("hpc_ray/cli.py not written yet")
    cmd = [sys.executable, "-c", "import sys; from hpc_ray.cli import main; "
           "sys.argv[0] = 'hpc-ray'; main()",
           "run", "-n", "3", str(SCRIPTS_DIR / "launch_basic.py"), "alpha", "--beta=1"]
    result = run("launch_basic.py", 3, mode="module", cmd=cmd, timeout=90)
    values = result.assert_ok("launch_basic")
    assert result.stdout.count("AFTER_INIT") == 1
    assert values["argv"] == ["alpha", "--beta=1"]
    assert values["concurrent_workers"] == 2


@pytest.mark.parametrize("variable,launched", [
    ("PMI_RANK", True), ("PMIX_RANK", True), ("OMPI_COMM_WORLD_SIZE", True),
    ("OMPI_MCA_btl_tcp_if_include", False), ("HYDRA_LAUNCHER", False)])
def test_only_a_launchers_rank_variables_say_a_process_was_launched(monkeypatch, variable,
                                                                     launched):
    # confine_network sets OMPI_MCA_btl_tcp_if_include in the driver: a python
    # started from it (or after it) was taken for a launched rank, and an
    # embedded driver left MPI_Finalize to mpi4py.
    from hpc_ray.runtime import launched as launched_module
    for key in list(os.environ):
        if key.startswith(("PMI_", "PMIX_", "OMPI_", "HYDRA_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv(variable, "1")
    assert launched_module.under_launcher() is launched
