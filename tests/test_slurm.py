"""hpc_ray.slurm without a cluster: time limits, the generated script, errors, paths.

The generated script is also run here, by bash, with stand-in ``srun`` and
``scontrol`` commands on PATH that record how they were called: that checks the
USR1 forwarding and the requeue decision without a Slurm (test_slurm_jobs.py does
it on a real one).
"""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hpc_ray import slurm


@pytest.fixture
def tmp_path():
    """A scratch directory removed after the test (pytest's own keeps the last three)."""
    with tempfile.TemporaryDirectory(prefix="hpc_ray-test-") as d:
        yield Path(d)

# --- time limits ---------------------------------------------------------------


@pytest.mark.parametrize("text, seconds", [
    ("30", 1800), ("0", 0), ("90:30", 5430), ("1:00:00", 3600), ("48:00:00", 172800),
    ("2-12", 216000), ("2-12:30", 217800), ("1-00:00:01", 86401), (" 5:00 ", 300),
    ("UNLIMITED", None), ("infinite", None),
])
def test_slurm_time_formats_are_accepted(text, seconds):
    assert slurm.parse_time_limit(text) == seconds


@pytest.mark.parametrize("text, why", [
    ("1h", ""), ("", ""), ("1:2:3:4", ""), ("-1", ""), ("1.5", ""), ("1-", ""),
    ("1:60:00", " (minutes and seconds must be below 60)"),
    ("10:75", " (minutes and seconds must be below 60)"),
    ("1-24:00", " (hours after a day count must be below 24)"),
])
def test_wrong_time_formats_say_which_formats_work(text, why):
    with pytest.raises(slurm.TimeFormatError) as info:
        slurm.parse_time_limit(text)
    assert str(info.value) == (
        f"time limit {text!r} is not a Slurm time{why}: use minutes, MM:SS, HH:MM:SS, "
        "D-HH, D-HH:MM or D-HH:MM:SS (for example 30, 1:00:00, 2-12:00:00)")
    assert isinstance(info.value, ValueError)


# --- the script -------------------------------------------------------------------


@pytest.fixture
def driver(tmp_path):
    path = tmp_path / "my driver.py"
    path.write_text("print('hi')\n")
    return path


def test_script_has_the_requested_directives_and_launch_line(driver):
    spec = slurm.JobSpec(driver=str(driver), args=("--lr", "0.1", "it's"), nodes=2,
                         ntasks_per_node=4, cpus_per_task=2, gpus_per_node=1,
                         time="1:00:00", partition="gpu", account="proj", requeue=True,
                         setup=("module load openmpi",), srun_mpi="pmix",
                         output="/scratch/my runs/%j.out",
                         python="/opt/py/bin/python", sbatch_options=("--mem=8G",))
    script = slurm.render_script(spec)
    directives = [l for l in script.splitlines() if l.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=hpc_ray-my_driver", "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4", "#SBATCH --cpus-per-task=2",
        "#SBATCH --gpus-per-node=1", "#SBATCH --time=1:00:00", "#SBATCH --partition=gpu",
        "#SBATCH --account=proj", '#SBATCH --output="/scratch/my runs/%j.out"',
        "#SBATCH --signal=B:USR1@120", "#SBATCH --requeue", "#SBATCH --open-mode=append",
        "#SBATCH --mem=8G"]
    assert script.startswith("#!/bin/bash\n")
    assert "\nmodule load openmpi\n" in script
    assert 'export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"' in script
    assert (f"\nsrun --kill-on-bad-exit=1 --mpi=pmix /opt/py/bin/python -m hpc_ray '{driver}' --lr 0.1 "
            "'it'\"'\"'s' &\n") in script
    assert 'scontrol requeue "$SLURM_JOB_ID"' in script


def test_defaults_leave_slurms_defaults_alone(driver):
    script = slurm.render_script(slurm.JobSpec(driver=str(driver), launcher="mpiexec"))
    directives = [l for l in script.splitlines() if l.startswith("#SBATCH")]
    assert directives == ["#SBATCH --job-name=hpc_ray-my_driver",
                          "#SBATCH --output=%x-%j.out", "#SBATCH --signal=B:USR1@120"]
    assert f'\nmpiexec -n "$SLURM_NTASKS" {sys.executable} -m hpc_ray \'{driver}\' &\n' \
        in script
    assert "requeue" not in script
    assert "SRUN_CPUS_PER_TASK" not in script


@pytest.mark.parametrize("field, value, message", [
    ("time", "1h", "time limit '1h' is not a Slurm time"),
    ("nodes", 0, "nodes must be >= 1, got 0"),
    ("gpus_per_node", -1, "gpus-per-node must be >= 0, got -1"),
    ("launcher", "aprun", "launcher must be 'srun' or 'mpiexec', got 'aprun'"),
])
def test_spec_check_names_the_bad_value(driver, field, value, message):
    spec = slurm.JobSpec(driver=str(driver), **{field: value})
    with pytest.raises(slurm.SlurmError, match="^" + message.replace("(", r"\(")):
        spec.check()


def test_missing_driver_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(slurm.DriverNotFoundError) as info:
        slurm.submit(slurm.JobSpec(driver="nope.py"))
    assert str(info.value) == (f"driver file 'nope.py' does not exist (looked in {tmp_path}); "
                               "give the path to your hpc_ray script")


# --- the script, run by bash with stand-in Slurm commands ------------------------------


FAKE_SRUN = """#!/bin/bash
# Stands in for srun: records its arguments, then becomes the rank command (one rank).
echo "srun $*" >> "$LOG"
while [ "${1#-}" != "$1" ]; do shift; done
exec "$@"
"""
FAKE_SCONTROL = """#!/bin/bash
echo "scontrol $*" >> "$LOG"
"""
FAKE_DRIVER = """
import os, signal, sys, time
from hpc_ray import preempt
stop = []
preempt.on_preempt(lambda: stop.append(1))
preempt.install_preempt_handler()
print("driver started", flush=True)
deadline = time.monotonic() + 30
while not stop and time.monotonic() < deadline:
    time.sleep(0.02)
print("driver checkpointed" if stop else "driver timed out", flush=True)
sys.exit(0 if stop else 9)
"""


def run_script_with_fake_slurm(tmp_path, spec_kwargs, signal_batch: bool):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    drv = tmp_path / "driver.py"
    drv.write_text(FAKE_DRIVER)
    spec = slurm.JobSpec(driver=str(drv), **spec_kwargs)
    script = tmp_path / "job.sh"
    script.write_text(slurm.render_script(spec))
    log = tmp_path / "log"
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               SLURM_JOB_ID="4242", TMPDIR=str(tmp_path), LOG=str(log))
    proc = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        pidfile = tmp_path / "hpc_ray-4242.driver.pid"
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline, "the driver never wrote its pid file"
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        if signal_batch:
            # What --signal=B:USR1@120 does: USR1 to the batch shell only.
            os.kill(proc.pid, signal.SIGUSR1)
        else:
            os.kill(int(pidfile.read_text()), signal.SIGUSR1)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    return proc.returncode, out, err, log.read_text().splitlines(), pidfile


@pytest.mark.timeout(90)
def test_batch_shell_forwards_usr1_to_the_driver_and_requeues(tmp_path):
    rc, out, err, calls, pidfile = run_script_with_fake_slurm(
        tmp_path, {"requeue": True}, signal_batch=True)
    assert rc == 0, out + err
    assert out.splitlines() == ["driver started", "driver checkpointed"]
    assert "hpc_ray: Slurm warns job 4242 of its end; telling the driver" in err
    assert calls[0].startswith(f"srun --kill-on-bad-exit=1 {sys.executable} -m hpc_ray")
    assert calls[1:] == ["scontrol requeue 4242"]
    assert not pidfile.exists()


@pytest.mark.timeout(90)
def test_no_requeue_without_the_warning_or_without_requeue(tmp_path):
    # The driver stops on its own USR1 (not the batch shell's): no requeue.
    rc, out, err, calls, _ = run_script_with_fake_slurm(
        tmp_path, {"requeue": True}, signal_batch=False)
    assert rc == 0, out + err
    assert [c.split()[0] for c in calls] == ["srun"]


# --- submission path and errors --------------------------------------------------------


def test_sbatch_is_the_path_without_pyslurm(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # makes `import pyslurm` fail
    path, why = slurm.submission_path()
    assert path == "sbatch"
    assert why.startswith("pyslurm is not importable (")


def test_sbatch_path_can_be_forced(monkeypatch):
    monkeypatch.setenv("HPC_RAY_SLURM_SUBMIT", "sbatch")
    assert slurm.submission_path() == ("sbatch", "HPC_RAY_SLURM_SUBMIT=sbatch")


def test_no_slurm_commands_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(slurm.SlurmNotFoundError) as info:
        slurm.job_records("12")
    assert str(info.value).startswith(
        "no Slurm on this machine: the 'scontrol' command is not on PATH.")


@pytest.mark.parametrize("job_id", ["12 13", "abc", "", "12;rm"])
def test_a_job_id_must_look_like_one(job_id):
    with pytest.raises(slurm.SlurmError, match="is not a Slurm job id"):
        slurm.job_records(job_id)


@pytest.mark.parametrize("exc", [
    slurm.SlurmNotFoundError("no Slurm"),
    slurm.SubmissionError("rejected", "sbatch: error: x"),
    slurm.InvalidPartitionError("no partition", "Invalid partition name specified"),
    slurm.InvalidAccountError("no account", "Invalid account"),
    slurm.SlurmUnavailableError("down", "Unable to contact slurm controller"),
    slurm.TimeFormatError("bad time"),
    slurm.DriverNotFoundError("no driver"),
    slurm.JobNotFoundError("no job"),
])
def test_errors_pickle_with_their_message_and_slurms_words(exc):
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert str(back) == str(exc) == exc.args[0]
    assert isinstance(back, slurm.SlurmError)
    if isinstance(exc, slurm.SlurmCommandError):
        assert back.slurm_message == exc.slurm_message != ""


def test_scontrol_records_parse_keys_with_punctuation():
    line = ("JobId=7 JobName=my job ArrayTaskId=3 JobState=RUNNING Reason=None "
            "ExitCode=0:0 AllocNode:Sid=login:12 CPUs/Task=2 WorkDir=/home/a b "
            "StdOut=/home/a b/out-7.txt StdErr=/home/a b/out-7.txt TresPerNode=gres:gpu:2")
    record = slurm._parse_record(line)
    assert record["JobName"] == "my job"
    assert record["AllocNode:Sid"] == "login:12"
    assert record["CPUs/Task"] == "2"
    assert record["TresPerNode"] == "gres:gpu:2"
    assert slurm.output_paths(record) == [Path("/home/a b/out-7.txt")]


@pytest.mark.parametrize("state, exit_code, status", [
    ("COMPLETED", "0:0", 0), ("FAILED", "3:0", 3), ("CANCELLED", "0:15", 143),
    ("TIMEOUT", "0:0", 1), ("OUT_OF_MEMORY", "0:125", 253), ("FAILED", "0:9", 137),
])
def test_exit_status_is_what_a_shell_would_show(state, exit_code, status):
    assert slurm._exit_status({"JobState": state, "ExitCode": exit_code}) == status


def test_tail_reads_appends_and_restarts_after_truncation(tmp_path):
    path = tmp_path / "out"
    tail = slurm._Tail(path)
    assert tail.read() == ""
    path.write_bytes("héllo\n".encode()[:2])  # half of 'é'
    assert tail.read() == "h"
    with open(path, "ab") as f:
        f.write("héllo\n".encode()[2:])
    assert tail.read() == "éllo\n"
    path.write_text("new\n")
    assert tail.read() == "new\n"
