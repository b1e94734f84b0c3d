"""Issue 10: hpc_ray.tune.

- The seed's Tune examples (function API, Trainable with checkpoints, grid and
  random search, each scheduler, PBT, segfault retries) in one launch per mode:
  tests/mpi_scripts/tune_examples.py.
- Resume: the whole job is SIGKILLed mid-way, then run again with resume=True:
  tests/mpi_scripts/tune_resume.py.
- Pure parts without MPI: variant generation, schedulers' decisions, the
  experiment state file, the status table, the searcher's missing-library error.
"""
from __future__ import annotations

import json
import os
import subprocess
import uuid

import pytest

from conftest import (LAUNCH_MARKER, SCRIPTS_DIR, _kill_launch, _launch_processes,
                      build_command, launch_env, poll_for)


@pytest.mark.mpi
@pytest.mark.faults
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_tune_examples_embedded(run):
    result = run("tune_examples.py", 3, mode="embedded", timeout=150)
    values = result.assert_ok("tune_examples")
    assert values["func_best"] == {"x": 3}
    spent = values["iterations"]
    assert spent["fifo"] == 8 * 27
    assert max(spent["asha"], spent["hyperband"], spent["median"]) < spent["fifo"], spent
    assert values["pbt"]["exploit"] > values["pbt"]["plain"]
    assert values["segv_failures"] == 1
    # The status table, in the batch-log (non-TTY) form.
    assert "== Status ==" in result.stdout
    assert "Number of trials: 4 (4 TERMINATED)" in result.stdout


@pytest.mark.mpi
def test_tune_examples_mpiexec(run):
    result = run("tune_examples.py", 3, "quick", mode="mpiexec", timeout=90)
    values = result.assert_ok("tune_examples")
    assert values["func_best"] == {"x": 3}
    assert values["cls_trials"] == 6


@pytest.mark.mpi
@pytest.mark.faults
def test_tune_resume_after_sigkill(run, tmp_path):
    script = str(SCRIPTS_DIR / "tune_resume.py")
    env = launch_env(3, "embedded", 60, {"HPC_RAY_TEST_TMPDIR": str(tmp_path)})
    marker = env[LAUNCH_MARKER] = uuid.uuid4().hex
    proc = subprocess.Popen(build_command(script, 3, ["first"], "embedded"), env=env,
                            cwd=str(SCRIPTS_DIR), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    ledger = tmp_path / "ledger"

    def progressed():
        # Two trials done, others running with checkpoints, some still pending.
        return ledger.exists() and len(ledger.read_text().splitlines()) >= 20

    try:
        reached = poll_for(progressed, 60)
    finally:
        _kill_launch(proc.pid, marker)  # SIGKILL: the driver and every worker
        _, err = proc.communicate(timeout=30)
    assert reached, err.decode(errors="replace")
    assert poll_for(lambda: not _launch_processes(proc.pid, marker), 15)
    state = tmp_path / "ray_results" / "resumable"
    assert (state / "experiment_state.json").exists()
    result = run("tune_resume.py", 3, "resume", mode="embedded", timeout=90)
    summary = result.assert_ok("tune_resume")["summary"]
    firsts = [s["first"] for s in summary.values()]
    assert 8 in firsts and any(f < 8 for f in firsts), summary  # killed mid-way


# --- pure parts ------------------------------------------------------------------------


def test_grid_times_num_samples_and_dependent_samples():
    from hpc_ray import tune
    from hpc_ray.tune.sample import generate_variants

    space = {"alpha": tune.sample_from(lambda spec: 10.0),
             "beta": tune.sample_from(lambda spec: spec.config.alpha * 2),
             "nn": [tune.grid_search([16, 64, 256]), tune.grid_search([16, 64, 256])],
             "lr": tune.loguniform(1e-4, 1e-1), "act": tune.choice(["relu", "tanh"]),
             "n": tune.randint(1, 4), "f": tune.function(len)}
    variants = [cfg for _ in range(2) for _, cfg in generate_variants(space)]
    assert len(variants) == 18
    assert sorted({tuple(v["nn"]) for v in variants}) == sorted(
        (a, b) for a in (16, 64, 256) for b in (16, 64, 256))
    for v in variants:
        assert v["beta"] == 20.0 and 1e-4 <= v["lr"] <= 1e-1 and v["act"] in ("relu", "tanh")
        assert 1 <= v["n"] < 4 and v["f"]("abc") == 3


def test_state_file_round_trip(tmp_path):
    from hpc_ray.tune.trial import Checkpoint, Trial
    from hpc_ray.tune.trial_runner import JOURNAL_FILE, STATE_FILE, load_experiment_state

    a = Trial("f", {"x": 1, "g": lambda: 3}, experiment_tag="0_x=1")
    b = Trial("f", {"x": 2}, experiment_tag="1_x=2")
    (tmp_path / STATE_FILE).write_text(json.dumps({"trials": [a.to_state(), b.to_state()]}))
    b.status, b.checkpoint = Trial.TERMINATED, Checkpoint("/some/checkpoint_4", 4)
    with open(tmp_path / JOURNAL_FILE, "w") as f:
        f.write(json.dumps(b.to_state()) + "\n")
        f.write('{"trial_id": "torn by a ki')  # the last line of a killed job
    _, trials = load_experiment_state(str(tmp_path))
    by_tag = {t.experiment_tag: t for t in trials}
    assert by_tag["0_x=1"].status == Trial.PENDING and by_tag["0_x=1"].config["g"]() == 3
    assert by_tag["1_x=2"].status == Trial.TERMINATED
    assert by_tag["1_x=2"].checkpoint.iteration == 4


class _Runner:
    def __init__(self, trials):
        self.trials = trials
        self.stopped, self.unpaused = [], []

    def get_trials(self):
        return self.trials

    def has_resources(self, resources):
        return True

    def stop_trial(self, trial):
        self.stopped.append(trial)
        trial.status = "TERMINATED"

    def unpause_trial(self, trial):
        self.unpaused.append(trial)
        trial.status = "PENDING"


def test_asha_stops_the_worse_half_at_each_rung():
    from hpc_ray.tune.schedulers import ASHAScheduler, TrialScheduler
    from hpc_ray.tune.trial import Trial

    sched = ASHAScheduler(metric="m", mode="min", max_t=9, grace_period=1, reduction_factor=3)
    trials = [Trial("f", {"i": i}) for i in range(3)]
    runner = _Runner(trials)
    for t in trials:
        sched.on_trial_add(runner, t)
    decisions = [sched.on_trial_result(runner, t, {"training_iteration": 1, "m": m})
                 for t, m in zip(trials, [1.0, 0.5, 2.0])]
    assert decisions == [TrialScheduler.CONTINUE, TrialScheduler.CONTINUE, TrialScheduler.STOP]
    assert sched.on_trial_result(runner, trials[0], {"training_iteration": 9, "m": 0}) == \
        TrialScheduler.STOP  # max_t


def test_hyperband_pauses_then_halves():
    from hpc_ray.tune.schedulers import HyperBandScheduler, TrialScheduler
    from hpc_ray.tune.trial import Trial

    sched = HyperBandScheduler(metric="m", mode="max", max_t=9, reduction_factor=3)
    trials = [Trial("f", {"i": i}) for i in range(3)]
    runner = _Runner(trials)
    for t in trials:
        sched.on_trial_add(runner, t)
        t.status = Trial.RUNNING
    # The first bracket (s=0) holds 3 trials with milestone 9 = max_t; fill it.
    first = sched._trial_bracket[trials[0]]
    assert first.n0 == 3 and first.r == 9
    out = [sched.on_trial_result(runner, t, {"training_iteration": 9, "m": i})
           for i, t in enumerate(trials)]
    assert out == [TrialScheduler.STOP] * 3
    more = [Trial("f", {"i": i}) for i in range(5)]
    runner.trials += more
    for t in more:
        sched.on_trial_add(runner, t)
        t.status = Trial.RUNNING
    second = sched._trial_bracket[more[0]]
    assert (second.n0, second.r) == (5, 3)
    got = {}
    for i, t in enumerate(more):
        got[t.config["i"]] = sched.on_trial_result(runner, t, {"training_iteration": 3, "m": i})
        if got[t.config["i"]] == TrialScheduler.PAUSE:
            t.status = Trial.PAUSED
    # The last result triggers the halving: the best two go on, the rest stop.
    assert got[4] == TrialScheduler.CONTINUE
    assert [t.config["i"] for t in runner.unpaused] == [3]
    assert sorted(t.config["i"] for t in runner.stopped) == [0, 1, 2]


def test_median_stopping_rule():
    from hpc_ray.tune.schedulers import MedianStoppingRule, TrialScheduler
    from hpc_ray.tune.trial import Trial

    sched = MedianStoppingRule(time_attr="t", metric="m", mode="max", grace_period=1,
                               min_samples_required=2)
    trials = [Trial("f", {"i": i}) for i in range(3)]
    runner = _Runner(trials)
    for t in (0, 1, 2):
        for trial, m in zip(trials[:2], (1.0, 2.0)):
            sched.on_trial_result(runner, trial, {"t": t, "m": m})
    assert sched.on_trial_result(runner, trials[2], {"t": 2, "m": 0.1}) == TrialScheduler.STOP
    assert sched.on_trial_result(runner, trials[1], {"t": 3, "m": 2.0}) == TrialScheduler.CONTINUE


def test_pbt_explore():
    from hpc_ray.tune.schedulers.pbt import explore

    out = explore({"lr": 1.0, "k": 10, "c": 2}, {"lr": lambda: 5.0, "c": [1, 2, 3]}, 0.0, None)
    assert out["lr"] in (0.8, 1.2) and out["c"] in (1, 3) and out["k"] == 10
    out = explore({"lr": 1.0}, {"lr": lambda: 5.0}, 1.0, lambda c: dict(c, extra=1))
    assert out == {"lr": 5.0, "extra": 1}


@pytest.mark.parametrize("population,fraction,exploit", [(5, 0.25, 2), (10, 0.25, 3),
                                                          (7, 0.25, 2), (4, 0.5, 2), (3, 0.5, 1)])
def test_pbt_quantiles_round_up_as_rays(population, fraction, exploit):
    # Ray: ceil(n * quantile_fraction) trials at the bottom and at the top (at
    # most half): 5 trials at 0.25 exploit 2, not round(1.25) = 1.
    from hpc_ray.tune.schedulers import PopulationBasedTraining
    from hpc_ray.tune.trial import Trial

    pbt = PopulationBasedTraining(time_attr="t", metric="m", perturbation_interval=10 ** 9,
                                  quantile_fraction=fraction, hyperparam_mutations={"x": [1]})
    trials = [Trial("f", {"i": i}) for i in range(population)]
    runner = _Runner(trials)
    for i, trial in enumerate(trials):
        pbt.on_trial_add(runner, trial)
        pbt.on_trial_result(runner, trial, {"t": 1, "m": float(i)})
    lower, upper = pbt._quantiles()
    assert [t.config["i"] for t in lower] == list(range(exploit))
    assert [t.config["i"] for t in upper] == list(range(population - exploit, population))


def test_status_table_lists_trials_by_state():
    from hpc_ray.tune.progress import ProgressReporter
    from hpc_ray.tune.schedulers import FIFOScheduler
    from hpc_ray.tune.trial import Trial

    trials = [Trial("train", {"x": i}, experiment_tag=f"{i}_x={i}") for i in range(3)]
    trials[0].status = Trial.RUNNING
    trials[0].last_result = {"training_iteration": 3, "time_total_s": 1.5, "mean_loss": 0.25,
                             "pid": 42}
    trials[1].status = Trial.TERMINATED
    text = ProgressReporter(1, "/results/exp", FIFOScheduler(), {"CPU": 2}).table(trials)
    assert "Using FIFO scheduling algorithm." in text
    assert "Resources requested: 1/2 CPUs, 0/0 GPUs" in text
    assert "Number of trials: 3 (1 RUNNING, 1 TERMINATED, 1 PENDING)" in text
    assert f"{trials[0]}: RUNNING [pid=42], 3 iter, 1.5 s, mean_loss=0.25" in text


def test_verbose_2_prints_each_trials_results(capsys):
    from hpc_ray.tune.progress import ProgressReporter
    from hpc_ray.tune.schedulers import FIFOScheduler
    from hpc_ray.tune.trial import Trial

    trial = Trial("train", {"x": 1}, experiment_tag="0_x=1")
    result = {"training_iteration": 1, "mean_loss": 0.25, "config": {"x": 1}}
    for verbose in (1, 2):
        reporter = ProgressReporter(verbose, "/results/exp", FIFOScheduler(), {"CPU": 2})
        reporter.trial_result(trial, result)
        reporter.trial_result(trial, dict(result, training_iteration=2))  # within 5 s
        reporter.trial_result(trial, dict(result, training_iteration=3), final=True)
        out = capsys.readouterr().out
        if verbose == 1:
            assert out == ""
            continue
        assert out.count(f"Result for {trial}:") == 2
        assert "  mean_loss: 0.25" in out or '"mean_loss": 0.25' in out
        assert "training_iteration: 3" in out or '"training_iteration": 3' in out
        assert "training_iteration: 2" not in out and '"training_iteration": 2' not in out


def _function_trainable(config, reporter):
    reporter(acc=1.0)


@pytest.mark.parametrize("make", [
    lambda s: s.HyperBandScheduler(metric="acc", mode="max", max_t=9),
    lambda s: s.PopulationBasedTraining(metric="acc", mode="max",
                                        hyperparam_mutations={"lr": [0.1, 0.2]}),
    lambda s: s.MedianStoppingRule(metric="acc", mode="max", hard_stop=False),
])
def test_pausing_schedulers_with_a_function_trainable_fail_before_any_trial(make):
    from hpc_ray import api, tune
    from hpc_ray.exceptions import RayError
    from hpc_ray.tune import schedulers

    assert not api.is_initialized()
    with pytest.raises(tune.TuneError, match=r"pauses trials.*'_function_trainable' is a "
                                             r"function trainable.*tune.Trainable subclass"):
        tune.run(_function_trainable, scheduler=make(schedulers), verbose=0)
    assert not api.is_initialized()  # raised before a cluster started
    # Schedulers that only stop trials take functions (the run then needs a cluster).
    for ok in (schedulers.AsyncHyperBandScheduler(metric="acc", mode="max"),
               schedulers.MedianStoppingRule(metric="acc", mode="max"),
               schedulers.FIFOScheduler()):
        with pytest.raises(RayError, match="ray.init"):
            tune.run(_function_trainable, scheduler=ok, verbose=0, ray_auto_init=False)


def test_optuna_search_error_without_optuna(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_optuna(name, *args, **kwargs):
        if name == "optuna" or name.startswith("optuna."):
            raise ImportError("No module named 'optuna'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_optuna)
    from hpc_ray.tune.suggest.optuna import OptunaSearch
    with pytest.raises(ImportError, match=r"pip install 'hpc_ray\[tune-optuna\]'"):
        OptunaSearch({"x": ("uniform", 0, 1)}, metric="m", mode="max")


@pytest.mark.mpi
@pytest.mark.faults
def test_tune_checkpoints_on_slurm_warning_and_resumes(run, tmp_path, mpiexec):
    """Slurm's USR1 warning, as slurm/requeue.sbatch forwards it to the driver:
    every running trial is checkpointed, tune.run returns, the job exits 0; the
    requeued job (resume=True) continues each trial where it stopped."""
    import signal as _signal
    pidfile = tmp_path / "driver.pid"
    script = str(SCRIPTS_DIR / "tune_resume.py")
    env = launch_env(3, "module", 60, {"HPC_RAY_TEST_TMPDIR": str(tmp_path),
                                       "HPC_RAY_DRIVER_PIDFILE": str(pidfile)})
    marker = env[LAUNCH_MARKER] = uuid.uuid4().hex
    proc = subprocess.Popen(build_command(script, 3, ["preempt"], "module"), env=env,
                            cwd=str(SCRIPTS_DIR), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ledger = tmp_path / "ledger"
    out = err = ""
    try:
        reached = poll_for(lambda: ledger.exists() and pidfile.exists()
                           and len(ledger.read_text().splitlines()) >= 20, 60)
        if reached:
            os.kill(int(pidfile.read_text()), _signal.SIGUSR1)
            out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            _kill_launch(proc.pid, marker)
        if not out and not err:
            out, err = proc.communicate(timeout=30)
    assert reached, out + err
    assert proc.returncode == 0, out + err
    assert "OK tune_resume" in out, out + err
    assert "Preempted: every running trial checkpointed" in out
    result = run("tune_resume.py", 3, "resume", mode="mpiexec", timeout=90)
    summary = result.assert_ok("tune_resume")["summary"]
    assert any(0 < s["first"] < 8 and s["second"] for s in summary.values()), summary
