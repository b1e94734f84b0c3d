"""Issue 35: RLlib training runs on rollout workers, in embedded mode and under mpiexec.

The thresholds are Ray's regression thresholds for CartPole (fixed seeds):
PPO >= 150 within 100k timesteps, PG and A3C >= 100 within 100k, IMPALA and
ES >= 150 within 500k, ARS >= 50 within 500k. DD-PPO and APPO only "learn
something" here (CI time); their threshold runs are benchmarks/rllib.py's
"thresholds" workload. The embedded threshold run (about 70 s on 2 cores) is a
``training`` test, left out of the default run (``python -m pytest -m
training``). Tune: ``tune.run("PPO")``, a YAML experiment through
``run_experiments`` with a ``register_env`` env, and ``resume=True`` after the
whole job was killed.
"""
from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from conftest import (LAUNCH_MARKER, SCRIPTS_DIR, _kill_launch, _launch_processes,
                      build_command, launch_env, poll_for)


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.training
@pytest.mark.timeout(300)
def test_trainers_reach_ray_thresholds_embedded(run):
    values = run("rllib_train.py", 3, "ppo", "pg", "a3c", "impala", "es", "ars",
                 mode="embedded", timeout=280).assert_ok("rllib_train")
    reward, steps = values["ppo"]
    assert reward >= 150 and steps <= 100_000, values["ppo"]
    assert values["ppo_greedy_return"] >= 150
    for alg, threshold, budget in (("pg", 100, 100_000), ("a3c", 100, 100_000),
                                   ("impala", 150, 500_000), ("es", 150, 500_000),
                                   ("ars", 50, 500_000)):
        reward, steps = values[alg]
        assert reward >= threshold and steps <= budget + 20_000, (alg, values[alg])
    # The noise table reaches each worker as a read-only view of the store's copy.
    assert all(not i["writeable"] and not i["owndata"] for i in values["es_noise"])


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_ppo_learns_under_mpiexec(run):
    values = run("rllib_train.py", 3, "ppo", mode="mpiexec", timeout=120).assert_ok(
        "rllib_train")
    reward, steps = values["ppo"]
    assert reward >= 150 and steps <= 100_000, values["ppo"]


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_ddppo_appo_learn_something_and_multiagent_on_workers(run):
    values = run("rllib_train.py", 3, "quick", mode="embedded", timeout=120).assert_ok(
        "rllib_train")
    first, last, same_weights = values["ddppo"]
    assert same_weights  # the allreduce keeps every learner's weights identical
    assert last > max(35, first), values["ddppo"]
    assert values["appo"][-1] > 40, values["appo"]
    assert values["multiagent"] == ["p0", "p1"]


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_cli_train_yaml_then_rollout(tmp_path):
    (tmp_path / "exp.yaml").write_text(
        "cartpole-pg:\n    run: PG\n    env: CartPole-v0\n    stop:\n"
        "        training_iteration: 2\n    checkpoint_freq: 2\n"
        "    config:\n        num_workers: 1\n        seed: 0\n")
    cli = [sys.executable, "-m", "hpc_ray.cli", "rllib"]
    out = subprocess.run(cli + ["train", "-f", str(tmp_path / "exp.yaml"), "--local-dir",
                                str(tmp_path / "res"), "--num-cpus", "2"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 TERMINATED" in out.stdout
    [ckpt] = (tmp_path / "res" / "cartpole-pg").glob("*/checkpoint_2/checkpoint-2")
    out = subprocess.run(cli + ["rollout", str(ckpt), "--run", "PG", "--steps", "300"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Mean reward over" in out.stdout
    bad = subprocess.run(cli + ["train", "--env", "CartPole-v0"], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert bad.returncode == 2 and "--run PPO" in bad.stderr


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_tune_run_and_yaml_experiments(run):
    values = run("rllib_tune.py", 3, "run", mode="embedded", timeout=120).assert_ok(
        "rllib_tune")
    assert {"result.json", "progress.csv", "params.json"} <= set(values["ppo_files"])
    assert any(f.startswith("checkpoint_") for f in values["ppo_files"])
    assert [r[0] for r in values["ppo_rows"]] == [1, 2]
    assert values["ppo_rows"][-1][1] >= 800
    iteration, reward = values["yaml_pg"]
    assert iteration == 10 and reward > 0.2  # the corridor's optimum is 0.6


@pytest.mark.mpi
@pytest.mark.faults
@pytest.mark.timeout(200)
def test_tune_resume_continues_a_killed_experiment(run, tmp_path):
    script = str(SCRIPTS_DIR / "rllib_tune.py")
    env = launch_env(3, "embedded", 90, {"HPC_RAY_TEST_TMPDIR": str(tmp_path)})
    marker = env[LAUNCH_MARKER] = uuid.uuid4().hex
    proc = subprocess.Popen(build_command(script, 3, ["first"], "embedded"), env=env,
                            cwd=str(SCRIPTS_DIR), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    results = tmp_path / "ray_results" / "ppo_resume"

    def checkpointed():
        return any(p.name == "checkpoint_2" for p in results.glob("*/checkpoint_*"))

    try:
        reached = poll_for(checkpointed, 80)
    finally:
        _kill_launch(proc.pid, marker)  # SIGKILL: the driver and every worker
        _, err = proc.communicate(timeout=30)
    assert reached, err.decode(errors="replace")[-3000:]
    assert poll_for(lambda: not _launch_processes(proc.pid, marker), 15)
    values = run("rllib_tune.py", 3, "resume", mode="embedded", timeout=120).assert_ok(
        "rllib_tune")
    rows = values["resume_rows"]
    iterations = [r[0] for r in rows]
    assert iterations[-1] == 6 and sorted(set(iterations)) == list(range(1, 7)), rows
    # After the restart the trainer continued from a checkpoint, not from scratch.
    restarted = [r for r in rows if r[1] == 1 and r[0] > 1]
    assert restarted, rows
    assert rows[-1][2] >= 6 * 400
