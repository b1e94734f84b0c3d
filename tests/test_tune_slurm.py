"""Issue 10 on a real one-node Slurm: a Tune sweep (examples/tune_requeue.py)
under slurm/requeue.sbatch gets Slurm's USR1 warning, checkpoints every running
trial, requeues itself, and the second run finishes every trial with each
iteration logged exactly once.  Skipped where the test cluster cannot start
(see tests/slurm/fixtures.py)."""
from __future__ import annotations

import json
import time
from datetime import datetime

import pytest

from slurm.fixtures import ROOT, job_dir, poll_for, sbatch, show_job, slurm_cluster, wait_job
from test_slurm_jobs import TEMPLATES, fit_template

__all__ = ["job_dir", "slurm_cluster"]  # fixtures, imported to be found by pytest

ITERS = 30


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_tune_sweep_checkpoints_on_warning_requeues_and_resumes(slurm_cluster, job_dir):
    results = job_dir / "ray_results"
    script = job_dir / "requeue.sbatch"
    script.write_text(fit_template((TEMPLATES / "requeue.sbatch").read_text(), "srun"))
    job = sbatch(slurm_cluster, "--overcommit", str(script),
                 str(ROOT / "examples" / "tune_requeue.py"), "--local-dir", str(results),
                 "--iterations", str(ITERS), "--step-seconds", "0.1", cwd=job_dir)
    out = job_dir / f"hpc_ray-resume-{job}.out"

    def text():
        return out.read_text() if out.exists() else ""

    def progressed():
        files = list(results.glob("requeue_sweep/*/result.json"))
        return any(len(f.read_text().splitlines()) >= 5 for f in files)

    poll_for(progressed, 90, "five iterations of a trial in the first run", text)
    slurm_cluster.run("scancel", "--signal=USR1", "--batch", job)

    def requeued():
        (r,) = show_job(slurm_cluster, job)
        return r if r["Restarts"] == "1" and r["JobState"] == "PENDING" else None
    requeued_at = datetime.fromisoformat(poll_for(requeued, 60, "the job being requeued",
                                                  text)["SubmitTime"]).timestamp()

    def safe_to_restart():  # as in test_slurm_jobs.py: skip Slurm's two-minute hold
        node_free = slurm_cluster.run("sinfo", "-h", "-N", "-o", "%t").stdout.strip() == "idle"
        return node_free and time.time() >= requeued_at + 2
    poll_for(safe_to_restart, 30, "the node freed by the first run")
    slurm_cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
    (record,) = wait_job(slurm_cluster, job, timeout=120, output=out)
    log = text()
    assert (record["JobState"], record["ExitCode"], record["Restarts"]) == (
        "COMPLETED", "0:0", "1"), log
    assert "checkpointed; the next run continues the sweep" in log
    assert "Preempted: every running trial checkpointed" in log
    assert log.index("run 2 of the sweep") > log.index("requeueing job")
    assert "done: best lr=0.1" in log
    trials = sorted(results.glob("requeue_sweep/Annealer_*/result.json"))
    assert len(trials) == 6, trials
    for f in trials:
        rows = [json.loads(line) for line in f.read_text().splitlines()]
        assert [r["training_iteration"] for r in rows] == list(range(1, ITERS + 1)), f
