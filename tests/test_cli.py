"""The `hpc-ray` command, run as a real process: `run` under the real mpiexec, the
MPI flavour detection, and the errors of `submit`/`status`/`cancel`/`logs` that
need no Slurm (the ones that do are in test_slurm_jobs.py)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import click
import pytest

from hpc_ray import cli, mpirun

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "slurm" / "driver_squares.py"
NO_SLURM_PATH = os.path.dirname(sys.executable)  # python and mpiexec, no sbatch


@pytest.fixture
def scratch():
    with tempfile.TemporaryDirectory(prefix="hpc_ray-test-") as d:
        yield Path(d)


def hpc_ray(*args: str, cwd: Path | str = ROOT, env: dict | None = None,
            timeout: float = 90) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, "-m", "hpc_ray.cli", *args], cwd=cwd,
                            env=dict(os.environ, **(env or {})), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"hpc-ray {' '.join(args)} timed out after {timeout}s:\n{out}\n{err}")
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def test_every_option_has_help():
    for name, command in cli.main.commands.items():
        assert command.help, name
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"hpc-ray {name} {param.opts[0]} has no help"


def test_version_and_help_list_the_commands():
    proc = hpc_ray("--help")
    assert proc.returncode == 0
    for name in ("run", "submit", "status", "cancel", "logs"):
        assert f"  {name} " in proc.stdout
    assert hpc_ray("--version").stdout.startswith("hpc-ray ")


# --- run -------------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["train", "rollout"])
def test_rllib_scripts_run_as_the_docs_run_them(name):
    # Ray 0.7's docs: "python ray/python/ray/rllib/train.py --help" is "rllib train".
    import hpc_ray.rllib
    script = os.path.join(os.path.dirname(hpc_ray.rllib.__file__), f"{name}.py")
    for argv in ([sys.executable, "-m", f"hpc_ray.rllib.{name}", "--help"],
                 [sys.executable, script, "--help"]):
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and f"Usage: rllib {name}" in out.stdout, out


def test_run_starts_the_driver_on_n_ranks_and_returns_its_exit_code():
    proc = hpc_ray("run", "-n", "3", str(DRIVER), "a", "--exit", "5", "b")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    (line,) = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    result = json.loads(line[len("RESULT "):])
    assert result["squares"] == [i * i for i in range(10)]
    assert result["world_size"] == 3
    assert result["argv"] == ["a", "b"]
    assert result["slurm_job_id"] is None


def test_run_m_runs_a_module_from_the_working_directory(scratch):
    # As `python -m pkg.squares` there would: the package is found on sys.path,
    # the working directory first; sys.argv[0] is the module's file.
    (scratch / "pkg").mkdir()
    (scratch / "pkg" / "__init__.py").write_text("")
    (scratch / "pkg" / "squares.py").write_text(DRIVER.read_text())
    proc = hpc_ray("run", "-n", "3", "-m", "pkg.squares", "a", "--exit", "4", cwd=scratch)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    (line,) = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    result = json.loads(line[len("RESULT "):])
    assert (result["squares"], result["world_size"], result["argv"]) == (
        [i * i for i in range(10)], 3, ["a"])


def test_run_dry_run_shows_the_mpiexec_command():
    proc = hpc_ray("run", "-n", "4", "--dry-run", str(DRIVER), "--x", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == mpirun.mpiexec_argv(
        4, [sys.executable, "-m", "hpc_ray", str(DRIVER), "--x", "1"])


def test_run_without_a_driver_file():
    proc = hpc_ray("run", "-n", "2", "nope.py")
    assert proc.returncode == 2
    assert proc.stderr.endswith("Error: driver file 'nope.py' does not exist\n")


def test_run_without_mpiexec(scratch):
    proc = hpc_ray("run", "-n", "2", str(DRIVER), env={"HPC_RAY_MPIEXEC": "no-such-mpiexec"})
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: no 'no-such-mpiexec' on PATH: install an MPI")


# --- mpiexec flags per MPI --------------------------------------------------------------


def fake_mpiexec(directory: Path, version_text: str) -> str:
    path = directory / "mpiexec"
    path.write_text(f"#!/bin/sh\necho '{version_text}'\n")
    path.chmod(0o755)
    return str(path)


def test_mpich_needs_no_flags():
    exe = mpirun.find_mpiexec()
    assert mpirun.mpi_flavor(exe) == "mpich"  # the mpich wheel installed here
    assert mpirun.mpiexec_argv(3, ["python", "x.py"]) == [exe, "-n", "3", "python", "x.py"]


@pytest.mark.parametrize("banner", ["mpiexec (OpenRTE) 4.1.4", "mpiexec (Open MPI) 5.0.3"])
def test_open_mpi_gets_oversubscribe_and_root_flags(scratch, banner):
    exe = fake_mpiexec(scratch, banner)
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    assert mpirun.mpiexec_argv(5, ["python", "x.py"], mpiexec=exe) == [
        exe, "-n", "5", "--oversubscribe", *root, "python", "x.py"]


def test_mpiexec_argv_checks_its_arguments():
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        mpirun.mpiexec_argv(0, ["python"])
    with pytest.raises(ValueError, match="argv must name the program"):
        mpirun.mpiexec_argv(2, [])


# --- submit and friends, without Slurm -------------------------------------------------


def test_submit_dry_run_needs_no_slurm(scratch):
    proc = hpc_ray("submit", str(DRIVER), "x", "--nodes", "2", "--ntasks-per-node", "4",
                   "--time", "1:00:00", "--requeue", "--setup", "module load openmpi",
                   "--dry-run", cwd=scratch, env={"PATH": NO_SLURM_PATH})
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    assert script.startswith("#!/bin/bash\n")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --time=1:00:00",
                 "#SBATCH --signal=B:USR1@120", "#SBATCH --requeue", "module load openmpi",
                 f"srun --kill-on-bad-exit=1 {sys.executable} -m hpc_ray {DRIVER} x &"):
        assert line + "\n" in script
    assert "# dry run, nothing submitted; would submit with sbatch" in proc.stderr


@pytest.mark.parametrize("command", [
    ["submit", str(DRIVER)], ["status"], ["status", "12"], ["cancel", "12"], ["logs", "12"],
])
def test_no_slurm_on_this_machine(command, scratch):
    proc = hpc_ray(*command, cwd=scratch, env={"PATH": NO_SLURM_PATH})
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: no Slurm on this machine: the ")
    assert "hpc-ray run -n N driver.py" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_submit_m_runs_a_module_in_the_submit_directory(scratch):
    proc = hpc_ray("submit", "-m", "pkg.train", "--lr", "0.1", "-n", "3", "--dry-run",
                   cwd=scratch, env={"PATH": NO_SLURM_PATH})
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --job-name=hpc_ray-train\n" in proc.stdout
    assert (f"srun --kill-on-bad-exit=1 {sys.executable} -m hpc_ray -m pkg.train --lr 0.1 &\n"
            in proc.stdout)


def test_submit_a_driver_that_does_not_exist(scratch):
    proc = hpc_ray("submit", "missing.py", "--nodes", "1", cwd=scratch)
    assert proc.returncode == 2
    assert proc.stderr.endswith(f"Error: driver file 'missing.py' does not exist (looked in "
                                f"{scratch}); give the path to your hpc_ray script\n")


@pytest.mark.parametrize("value", ["1h", "1:75:00", "tomorrow"])
def test_submit_a_time_limit_in_a_wrong_format(scratch, value):
    proc = hpc_ray("submit", str(DRIVER), "--time", value, cwd=scratch)
    assert proc.returncode == 2
    assert f"Invalid value for '-t' / '--time': time limit '{value}' is not a Slurm time" \
        in proc.stderr
    assert "use minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS" in proc.stderr
    assert "Traceback" not in proc.stderr
