"""Real jobs on a real one-node Slurm: the templates, `hpc-ray submit`, a job array,
checkpoint-and-requeue, status/cancel/logs, and the errors a user can meet.

The cluster (tests/slurm/cluster.py) has the machine's real CPU count: three ranks
on two cores need ``--overcommit``, and ``--ntasks-per-node`` may not exceed the
cores, so the tests set the resource lines of a template copy the way a user edits
them, and leave every other line as shipped.
"""
from __future__ import annotations

import re
import shutil
import time
from datetime import datetime
from pathlib import Path

import h5py
import pytest

from slurm.cluster import free_port
from slurm.fixtures import (DRIVER, ROOT, assert_squares_result, hpc_ray_cli, job_dir,
                            job_env, poll_for, result_of, run, sbatch, show_job,
                            slurm_cluster, wait_job)

__all__ = ["job_dir", "slurm_cluster"]  # fixtures, imported to be found by pytest

TEMPLATES = ROOT / "slurm"
LAUNCH = ROOT / "launch"
LAUNCH_RE = re.compile(r"^(# )?(srun|mpiexec) .*&\s*$")


# --- helpers ----------------------------------------------------------------------


def fit_template(text: str, launcher: str) -> str:
    """A template copy for this 2-core node with 3 ranks, launched by ``launcher``.

    Changes #SBATCH resource lines and which launch line is active, nothing else.
    """
    out = []
    for line in text.splitlines():
        m = re.match(r"^#SBATCH --(nodes|ntasks|ntasks-per-node|cpus-per-task|gpus-per-node)=\S+",
                     line)
        if m:
            line = {"nodes": "#SBATCH --nodes=1",
                    "ntasks": "#SBATCH --ntasks=3",
                    "ntasks-per-node": "#SBATCH --ntasks=3",
                    "cpus-per-task": "#SBATCH --cpus-per-task=1",
                    "gpus-per-node": "#SBATCH --gpus-per-node=3"}[m.group(1)]
        elif LAUNCH_RE.match(line):
            body = line[2:] if line.startswith("# ") else line
            line = body if body.startswith(launcher + " ") else "# " + body
        out.append(line)
    fitted = "\n".join(out) + "\n"
    active = [l for l in fitted.splitlines() if re.match(r"^(srun|mpiexec) .*&\s*$", l)]
    assert len(active) == 1 and active[0].startswith(launcher), active
    return fitted


def only_resource_and_launch_lines_differ(original: str, fitted: str) -> None:
    for a, b in zip(original.splitlines(), fitted.splitlines(), strict=True):
        if a != b:
            assert a.startswith("#SBATCH") or LAUNCH_RE.match(a), (a, b)


def output_of(directory: Path, pattern: str) -> str:
    files = sorted(directory.glob(pattern))
    assert len(files) == 1, f"expected one {pattern} in {directory}: {files}"
    return files[0].read_text()


# --- the templates ---------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
@pytest.mark.parametrize("template", ["one_node", "many_nodes", "gpus", "requeue"])
def test_template_runs_a_3_rank_driver(slurm_cluster, job_dir, template, launcher):
    if template == "gpus" and slurm_cluster.gpus < 3:
        pytest.skip("the test cluster has no fake GPUs here (mknod was not permitted)")
    original = (TEMPLATES / f"{template}.sbatch").read_text()
    fitted = fit_template(original, launcher)
    only_resource_and_launch_lines_differ(original, fitted)
    script = job_dir / f"{template}.sbatch"
    script.write_text(fitted)

    job = sbatch(slurm_cluster, "--overcommit", str(script), str(DRIVER), "alpha", "42",
                 cwd=job_dir)
    (record,) = wait_job(slurm_cluster, job)
    text = output_of(job_dir, f"*-{job}.out")
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), text
    result = result_of(text)
    assert_squares_result(result, job, slurm_cluster, ["alpha", "42"])
    assert result["resources"]["CPU"] >= 2
    if template == "gpus":
        # The job holds 3 of the node's GPUs: hpc_ray may offer no more than that,
        # and never one GPU to two ranks.
        offered = result["resources"].get("GPU", 0)
        assert 1 <= offered <= 3, result["resources"]
        ids_by_rank = {}
        for pid, ids in result["gpu_tasks"]:
            ids_by_rank.setdefault(pid, set()).update(ids)
        for pid, ids in ids_by_rank.items():
            others = set().union(*(v for p, v in ids_by_rank.items() if p != pid))
            assert not ids & others, f"GPU {ids & others} given to two ranks: {ids_by_rank}"
    # The driver's pid file is gone with the job.
    assert not Path(f"/tmp/hpc_ray-{job}.driver.pid").exists()


@pytest.mark.timeout(150)
@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_job_array_runs_independent_drivers(slurm_cluster, job_dir, launcher):
    original = (TEMPLATES / "job_array.sbatch").read_text()
    script = job_dir / "job_array.sbatch"
    script.write_text(fit_template(original, launcher))

    array = sbatch(slurm_cluster, "--array=0-2", "--overcommit", str(script),
                   str(DRIVER), "sweep", cwd=job_dir)
    records = wait_job(slurm_cluster, array, timeout=120)
    assert sorted(r["ArrayTaskId"] for r in records) == ["0", "1", "2"]
    for r in records:
        assert (r["JobState"], r["ExitCode"]) == ("COMPLETED", "0:0"), r
        task = r["ArrayTaskId"]
        text = output_of(job_dir, f"hpc_ray-array-{array}_{task}.out")
        result = result_of(text)
        # Each task is its own job, with its own id, running its own driver.
        assert_squares_result(result, r["JobId"], slurm_cluster, [task, "sweep"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", ["mpich.sh", "srun_pmi2.sh", "srun_pmix.sh", "openmpi.sh"])
def test_launch_script_inside_a_job(slurm_cluster, job_dir, script):
    env = job_env(slurm_cluster)
    if script == "srun_pmix.sh":
        plugins = slurm_cluster.run("srun", "--mpi=list", check=False)
        if "pmix" not in plugins.stdout + plugins.stderr or not shutil.which("pmix_info"):
            pytest.skip("no PMIx here (Slurm's mpi/pmix needs libpmix; the mpich wheel "
                        "speaks PMI-2, not PMIx)")
    if script == "openmpi.sh":
        version = run(["mpirun", "--version"], env=env, cwd=job_dir, timeout=30)
        if "Open MPI" not in version.stdout + version.stderr:
            pytest.skip("the mpirun on PATH is not Open MPI")
    job = sbatch(slurm_cluster, "--ntasks=3", "--overcommit", "--output=launch-%j.out",
                 "--wrap", f"{LAUNCH / script} {DRIVER} via-{script}", cwd=job_dir, env=env)
    (record,) = wait_job(slurm_cluster, job)
    text = output_of(job_dir, f"launch-{job}.out")
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), text
    assert_squares_result(result_of(text), job, slurm_cluster, [f"via-{script}"])


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_job_ends_when_the_driver_exits_with_tasks_still_running(slurm_cluster, job_dir,
                                                                 launcher):
    # Workers still report results while the driver shuts down. A report rank 0
    # never receives used to hang MPI_Finalize under srun (every time here), so
    # the job ran until its time limit.
    script = job_dir / "one_node.sbatch"
    script.write_text(fit_template((TEMPLATES / "one_node.sbatch").read_text(), launcher))
    job = sbatch(slurm_cluster, "--overcommit", str(script), str(DRIVER), "busy",
                 "--unfinished", "3000", cwd=job_dir)
    (record,) = wait_job(slurm_cluster, job, timeout=60)
    text = output_of(job_dir, f"*-{job}.out")
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), text
    assert_squares_result(result_of(text), job, slurm_cluster, ["busy"])


# --- hpc-ray submit ----------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("launcher", ["srun", "mpiexec"])
def test_submit_wait_streams_output_and_exits_with_job_status(slurm_cluster, job_dir,
                                                              launcher):
    proc = hpc_ray_cli("submit", str(DRIVER), "x", "--flag", "-n", "3", "--time", "5:00",
                       "--partition", slurm_cluster.partition, "--account", "hpcray",
                       "--job-name", "squares", "--launcher", launcher,
                       "-S", "--overcommit", "--wait",
                       env=job_env(slurm_cluster), cwd=job_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first, *rest = proc.stdout.splitlines()
    job = re.fullmatch(r"Submitted batch job (\d+)", first).group(1)
    result = result_of("\n".join(rest))
    assert_squares_result(result, job, slurm_cluster, ["x", "--flag"])
    (record,) = show_job(slurm_cluster, job)
    assert (record["JobName"], record["JobState"], record["TimeLimit"]) == (
        "squares", "COMPLETED", "00:05:00")
    # The output also went to the file --output names by default.
    assert result_of((job_dir / f"squares-{job}.out").read_text()) == result


@pytest.mark.timeout(120)
def test_submit_wait_returns_the_drivers_exit_code(slurm_cluster, job_dir):
    proc = hpc_ray_cli("submit", str(DRIVER), "--exit", "3", "-n", "3", "-S", "--overcommit",
                       "--wait", env=job_env(slurm_cluster), cwd=job_dir)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    job = re.search(r"Submitted batch job (\d+)", proc.stdout).group(1)
    assert f"job {job} ended FAILED (exit code 3:0)" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.timeout(60)
def test_submit_prints_the_job_id_and_dry_run_submits_nothing(slurm_cluster, job_dir):
    env = job_env(slurm_cluster)
    dry = hpc_ray_cli("submit", str(DRIVER), "--dry-run", "-n", "3", env=env, cwd=job_dir)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("#!/bin/bash\n")
    assert "would submit with sbatch" in dry.stderr
    assert slurm_cluster.run("squeue", "-h").stdout.strip() == ""

    sub = hpc_ray_cli("submit", str(DRIVER), "--sleep", "60", "-n", "3", "-S", "--overcommit",
                      "--parsable", env=env, cwd=job_dir)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip()
    assert job.isdigit()
    (record,) = show_job(slurm_cluster, job)
    assert record["JobState"] in ("PENDING", "RUNNING", "CONFIGURING")


# --- status, logs, cancel -------------------------------------------------------------


@pytest.mark.timeout(120)
def test_status_logs_and_cancel_a_running_job(slurm_cluster, job_dir):
    env = job_env(slurm_cluster)
    job = sbatch(slurm_cluster, "--ntasks=3", "--overcommit", "--output=long-%j.out",
                 str(TEMPLATES / "one_node.sbatch"), str(DRIVER), "--sleep", "100",
                 "--atexit", cwd=job_dir, env=env)
    out = job_dir / f"long-{job}.out"
    poll_for(lambda: out.exists() and "tick" in out.read_text(), 60, "the job's first tick",
             lambda: out.read_text() if out.exists() else "no output")

    listing = hpc_ray_cli("status", env=env, cwd=job_dir)
    assert listing.returncode == 0, listing.stderr
    header, *rows = listing.stdout.splitlines()
    assert header.split()[:3] == ["JobId", "Name", "State"]
    assert [r.split()[:3] for r in rows] == [[job, "hpc_ray", "RUNNING"]]

    one = hpc_ray_cli("status", job, env=env, cwd=job_dir)
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith(f"job {job} (hpc_ray): RUNNING")
    assert str(out) in one.stdout

    logs = hpc_ray_cli("logs", job, env=env, cwd=job_dir)
    assert logs.returncode == 0, logs.stderr
    assert_squares_result(result_of(logs.stdout), job, slurm_cluster, [])
    assert "tick" in logs.stdout

    cancelled = hpc_ray_cli("cancel", job, env=env, cwd=job_dir)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.strip() == f"cancelled job {job} (was RUNNING)"
    (record,) = wait_job(slurm_cluster, job)
    assert record["JobState"] == "CANCELLED"
    # Slurm sent SIGTERM to every rank at once: the driver's shutdown did not wait
    # for ranks that would never confirm, and the user's exit handler ran before
    # KillWait's SIGKILL (the test cluster's KillWait is 5 s).
    text = out.read_text()
    assert "driver atexit ran" in text, text[-3000:]
    assert "did not confirm the shutdown within" not in text, text[-3000:]

    # Following a job that ended reports its end and exits like it: killed by SIGTERM.
    follow = hpc_ray_cli("logs", job, "--follow", env=env, cwd=job_dir)
    assert follow.returncode == 128 + 15, follow.stdout + follow.stderr
    assert f"job {job} ended CANCELLED" in follow.stderr
    again = hpc_ray_cli("cancel", job, env=env, cwd=job_dir)
    assert again.stdout.strip() == f"job {job} had already ended (CANCELLED); nothing to cancel"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [["status", "987654"], ["cancel", "987654"],
                                     ["logs", "987654"]])
def test_unknown_job_id_is_a_clear_error(slurm_cluster, job_dir, command):
    proc = hpc_ray_cli(*command, env=job_env(slurm_cluster), cwd=job_dir)
    assert proc.returncode == 1
    assert proc.stderr.startswith("Error: job 987654 is not known to Slurm")
    assert "Traceback" not in proc.stderr


# --- requeue and resume ------------------------------------------------------------


@pytest.mark.timeout(150)
def test_warned_job_checkpoints_requeues_and_resumes(slurm_cluster, job_dir):
    """Slurm's USR1 warning -> on_preempt writes an HDF5 checkpoint -> the job
    requeues itself -> the second run resumes from the checkpoint and finishes."""
    steps, tasks = 40, 4
    expected_total = sum((s * 31 + i * 7) % 101 for s in range(steps) for i in range(tasks))
    ckpt = job_dir / "run.h5"
    script = job_dir / "requeue.sbatch"
    script.write_text(fit_template((TEMPLATES / "requeue.sbatch").read_text(), "srun"))
    job = sbatch(slurm_cluster, "--overcommit", str(script),
                 str(ROOT / "examples" / "checkpoint_resume.py"), "--steps", str(steps),
                 "--tasks", str(tasks), "--step-seconds", "0.25", "--checkpoint", str(ckpt),
                 cwd=job_dir)
    out = job_dir / f"hpc_ray-resume-{job}.out"

    def text():
        return out.read_text() if out.exists() else ""
    poll_for(lambda: "step 4 done" in text(), 60, "step 4 of the first run", text)
    # What --signal=B:USR1@300 does 300 s before the time limit, now.
    slurm_cluster.run("scancel", "--signal=USR1", "--batch", job)

    def requeued():
        (r,) = show_job(slurm_cluster, job)
        return r if r["Restarts"] == "1" and r["JobState"] == "PENDING" else None
    requeued_at = datetime.fromisoformat(poll_for(requeued, 60, "the job being requeued",
                                                  text)["SubmitTime"]).timestamp()
    # Slurm holds a requeued job back for two minutes, so that the old run's revoked
    # credential (one-second resolution) cannot match the new one's.  Let it start
    # as soon as that is safe: the node is free and two seconds have passed.
    def safe_to_restart():
        node_free = slurm_cluster.run("sinfo", "-h", "-N", "-o", "%t").stdout.strip() == "idle"
        return node_free and time.time() >= requeued_at + 2
    poll_for(safe_to_restart, 30, "the node freed by the first run")
    slurm_cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    (record,) = wait_job(slurm_cluster, job, timeout=90, output=out)
    log = text()
    assert (record["JobState"], record["ExitCode"], record["Restarts"]) == (
        "COMPLETED", "0:0", "1"), log

    stopped_at = int(re.search(r"checkpointed at step (\d+) to ", log).group(1))
    assert 5 <= stopped_at < steps, log
    assert "requeueing job" in log
    assert f"resumed from step {stopped_at} of {steps} (job requeued 1 times)" in log
    assert log.index("hpc_ray: job %s run 2 starts" % job) > log.index("checkpointed")
    assert f"done: {steps} steps, total {expected_total}" in log
    # Every step ran exactly once, across the two runs.
    done = [int(s) for s in re.findall(r"^step (\d+) done$", log, re.M)]
    assert sorted(done) == list(range(steps)), log
    with h5py.File(ckpt, "r") as f:
        assert f.attrs["next_step"] == steps
        assert f.attrs["requeue_count"] == 1
        assert int(f["step_sums"][...].sum()) == expected_total


# --- errors --------------------------------------------------------------------------


def submit_error(c, job_dir, *args: str):
    proc = hpc_ray_cli("submit", str(DRIVER), "-n", "3", *args, env=job_env(c), cwd=job_dir)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert c.run("squeue", "-h").stdout.strip() == ""
    return proc.stderr


@pytest.mark.timeout(60)
def test_unknown_partition_is_rejected_with_slurms_message(slurm_cluster, job_dir):
    err = submit_error(slurm_cluster, job_dir, "--partition", "nosuch")
    assert err.startswith("Error: Slurm rejected the job: partition 'nosuch' does not "
                          f"exist (partitions here: {slurm_cluster.partition}).\n"
                          "Slurm said: sbatch: error: invalid partition specified: nosuch\n")
    assert "sbatch: error: Batch job submission failed: Invalid partition name specified" in err


@pytest.mark.timeout(60)
def test_unknown_account_is_rejected_with_slurms_message(slurm_cluster, job_dir):
    err = submit_error(slurm_cluster, job_dir, "--account", "nosuch")
    assert err.startswith("Error: Slurm rejected the job: account 'nosuch' does not exist")
    assert "sbatch: error: Batch job submission failed: Invalid account or " \
           "account/partition combination specified" in err


@pytest.mark.timeout(60)
def test_impossible_request_is_rejected_with_slurms_message(slurm_cluster, job_dir):
    err = submit_error(slurm_cluster, job_dir, "--nodes", "2", "-S", "--overcommit")
    assert err == ("Error: Slurm rejected the job.\nSlurm said: sbatch: error: Batch job "
                   "submission failed: Node count specification invalid\n")


@pytest.mark.timeout(60)
def test_slurm_controller_down_is_a_clear_error(slurm_cluster, job_dir):
    # The cluster's configuration, but a controller port nobody listens on.
    conf = job_dir / "down.conf"
    conf.write_text(re.sub(r"(?m)^SlurmctldPort=\d+$", f"SlurmctldPort={free_port()}",
                           slurm_cluster.conf.read_text()))
    proc = hpc_ray_cli("submit", str(DRIVER), env=job_env(slurm_cluster, SLURM_CONF=str(conf)),
                       cwd=job_dir)
    assert proc.returncode == 1
    assert proc.stderr.startswith(
        "Error: Slurm is installed here but not usable: sbatch: error: Batch job submission "
        "failed: Unable to contact slurm controller (connect failure)\n"
        "Check SLURM_CONF and that slurmctld is up (`scontrol ping`).")
    assert "Traceback" not in proc.stderr
