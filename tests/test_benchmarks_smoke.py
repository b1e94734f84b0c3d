"""Smoke tests for benchmarks/microbenchmark.py: it runs and prints a table.

No timing is asserted here; speed claims live in benchmarks/README.md.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPT = BENCH_DIR / "microbenchmark.py"

#: Seconds for one quick run, start-up and shutdown included (Ray takes ~10 s).
RUN_TIMEOUT = 100


def _run(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=str(BENCH_DIR.parent), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)  # the script sweeps its own children; this is its session
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} timed out after {RUN_TIMEOUT}s; output so far:\n"
                    f"--- stdout ---\n{out}\n--- stderr ---\n{err}", pytrace=False)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _assert_table(res: subprocess.CompletedProcess, system: str, workload: str) -> None:
    shown = f"command: {' '.join(res.args)}\n--- stdout ---\n{res.stdout}\n" \
            f"--- stderr ---\n{res.stderr}"
    assert res.returncode == 0, shown
    header = [ln for ln in res.stdout.splitlines() if ln.startswith("| workload")]
    assert header and system in header[0], shown
    row = [ln for ln in res.stdout.splitlines() if ln.startswith(f"| {workload} ")]
    assert row, shown
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[2] not in ("ERR", "TIMEOUT", "-", ""), shown


@pytest.mark.parametrize("system", ["hpc_ray", "futures", "ray"])
def test_quick_run_prints_table(system):
    if system == "ray" and importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed (pip install ray)")
    res = _run("--systems", system, "--quick", "--only", "task_sync")
    _assert_table(res, system, "task_sync")


def test_list_names_every_workload():
    res = _run("--list")
    assert res.returncode == 0, res.stderr
    for name in ("task_sync", "task_async", "put_large", "get_large", "get_small",
                 "wait_1k", "tree_reduce", "actor_sync", "actor_async", "actor_nn_sync"):
        assert name in res.stdout


def test_report_ratios_and_verdicts(monkeypatch):
    # The parent-side report, on made-up figures: no runtime is started.
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    from bench_report import format_table, verdicts
    from bench_runner import Result, SystemRun

    runs = {
        "hpc_ray": SystemRun("hpc_ray", results={
            "task_async": Result("ok", 30000.0), "task_sync": Result("error", detail="boom")}),
        "ray": SystemRun("ray", results={
            "task_async": Result("ok", 2000.0), "task_sync": Result("ok", 600.0)}),
        "futures": SystemRun("futures", results={
            "task_async": Result("ok", 40000.0), "task_sync": Result("ok", 300.0)}),
    }
    assert verdicts(runs, "hpc_ray", "task_async") == ["PASS (ray)", "MISS (futures)"]
    assert verdicts(runs, "hpc_ray", "task_sync")[0].startswith("MISS")
    table = format_table(runs, ["task_sync", "task_async"])
    row = next(ln for ln in table.splitlines() if ln.startswith("| task_async "))
    assert "15.0x" in row and "0.75x" in row
    assert "ERR" in next(ln for ln in table.splitlines() if ln.startswith("| task_sync "))


def test_pick_prefers_reps_without_other_jobs(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    from bench_runner import pick

    # foreign = share of the CPUs other jobs used during each rep
    assert pick([5.0, 9.0, 7.0], [0.0, 0.5, 0.05], "best") == (7.0, False)
    assert pick([5.0, 9.0], [0.5, 0.6], "best") == (9.0, True)  # all noisy: flagged
    assert pick([1.0, 2.0, 3.0], [None] * 3, "median") == (2.0, False)


def test_json_round_trip(monkeypatch):
    import dataclasses

    monkeypatch.syspath_prepend(str(BENCH_DIR))
    from bench_report import with_stat
    from bench_runner import Result, SystemRun, load_runs

    runs = {"ray": SystemRun("ray", results={
        "task_sync": Result("ok", 3.0, reps=[1.0, 2.0, 3.0], foreign=[0.0, 0.0, 0.0])},
        load=(0.5, 0.7))}
    back = load_runs({k: dataclasses.asdict(v) for k, v in runs.items()})
    assert back == runs
    assert with_stat(back, "median")["ray"].results["task_sync"].value == 2.0


def test_wakeups_prints_every_placement():
    cmd = [sys.executable, str(BENCH_DIR / "wakeups.py"), "--calls", "200", "--reps", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert res.returncode == 0, res.stderr
    rows = [ln.split(" best ")[0].strip() for ln in res.stdout.splitlines() if " best " in ln]
    expected = ["same CPU", "two CPUs", "two CPUs, caller spins", "2 threads, 2 echoes, unpinned"]
    if len(os.sched_getaffinity(0)) < 2:
        expected = [expected[0], expected[3]]
    assert rows == expected, res.stdout
    assert all(ln.rstrip().endswith("round trips/s") for ln in res.stdout.splitlines()), res.stdout


def test_handle_args_prints_every_step():
    cmd = [sys.executable, str(BENCH_DIR / "handle_args.py"), "--trips", "20"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                         cwd=str(BENCH_DIR.parent))
    assert res.returncode == 0, res.stderr
    rows = {ln.split("|")[1].strip(): float(ln.split("|")[2])
            for ln in res.stdout.splitlines() if ln.startswith("| ") and "---" not in ln
            and not ln.startswith("| step")}
    assert list(rows) == ["serialize((1,))", "serialize((handle,))", "unpickle (handle,)",
                          "task taking an int", "task taking a handle",
                          "task making one call", "two tasks making one call each"], res.stdout
    assert all(v > 0 for v in rows.values()), res.stdout


def test_idle_reports_cpu_and_latency_of_an_idle_job():
    cmd = [sys.executable, str(BENCH_DIR / "idle.py"), "--systems", "hpc_ray", "--quick"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert res.returncode == 0, res.stderr
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("| hpc_ray |"))
    processes, idle_cpu, first_ms, short_ms, next_ms, busy = (
        float(c) for c in row.strip("| \n").split("|")[1:])
    assert processes >= 6 and idle_cpu >= 0 and first_ms > 0 and short_ms > 0, res.stdout
    assert next_ms > 0, res.stdout
    # The runtime's own CPU while two tasks run (CPU-time ticks may put it a hair below 0).
    assert -0.05 < busy < 2.0, res.stdout


def test_nn_caller_cpu_splits_the_cpu_of_calls_by_role():
    # Enough calls for the executors' CPU to span clock ticks (10 ms): with 100
    # calls (about 10 ms in all) every role could read 0.0 (a CI run did).
    cmd = [sys.executable, str(BENCH_DIR / "nn_caller_cpu.py"), "--calls", "1000",
           "--batches", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("calls/s "))
    got = re.fullmatch(r"calls/s (\d+) \| us/call: worker ranks ([\d.]+), "
                       r"head thread ([\d.]+), executors ([\d.]+)", line.strip())
    # Every role's figure is printed, by name; the executors (callers and actors)
    # ran the calls, so theirs is the one figure that cannot be zero.
    assert got is not None, res.stdout
    rate, ranks, head, executors = (float(x) for x in got.groups())
    assert rate > 0 and executors > 0, res.stdout


def test_call_steps_counts_the_bytecodes_of_a_sync_call_by_side():
    cmd = [sys.executable, str(BENCH_DIR / "call_steps.py"), "--traced", "20"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert res.returncode == 0, res.stderr
    rows = {ln.split("|")[1].strip(): float(ln.split("|")[2])
            for ln in res.stdout.splitlines() if ln.startswith("bytecodes per call |")}
    assert sorted(rows) == ["actor", "driver caller", "task caller"], res.stdout
    # Each side runs the runtime's Python for every call: hundreds of steps.
    assert all(100 < n < 100_000 for n in rows.values()), res.stdout


def test_chained_calls_prints_a_step_time():
    cmd = [sys.executable, str(BENCH_DIR / "chained_calls.py"), "--systems", "hpc_ray",
           "--iterations", "20", "--reps", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("| hpc_ray |"))
    ms = float(row.split("|")[2])
    assert ms > 0, row


def test_nested_tasks_prints_both_workloads():
    cmd = [sys.executable, str(BENCH_DIR / "nested_tasks.py"), "--systems", "hpc_ray",
           "--rounds", "1", "--reps", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [ln for ln in res.stdout.splitlines() if "tasks/s |" in ln]
    assert [r.split("|")[1].strip() for r in rows] == ["fib(12) tasks/s", "tree(5, 4) tasks/s"]
    assert all(float(r.split("|")[2].replace(",", "")) > 0 for r in rows), res.stdout


def test_collective_start_prints_every_window_of_both_systems():
    cmd = [sys.executable, str(BENCH_DIR / "collective_start.py"), "--windows", "3",
           "--ops", "5", "--size", "65536", "--repeat", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    header = next(ln for ln in res.stdout.splitlines() if ln.startswith("| window"))
    assert "hpc_ray_exec us/op" in header and "mpi4py us/op" in header, res.stdout
    rows = [ln for ln in res.stdout.splitlines() if re.match(r"\| \d+-\d+ \|", ln)]
    assert [r.split("|")[1].strip() for r in rows] == ["1-5", "6-10", "11-15"], res.stdout
    for r in rows:
        assert all(float(c.replace(",", "")) > 0 for c in r.strip("|").split("|")[1:]), r


def test_rank0_waits_splits_cpu_and_run_queue_waits_by_role(mpiexec):
    cmd = [*mpiexec.command(3), sys.executable, str(BENCH_DIR / "rank0_waits.py"),
           "--tasks", "2000"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    line = res.stdout.strip().splitlines()[-1]
    assert line.startswith("3 ranks, 2 worker CPUs: "), res.stdout
    assert re.search(r"rank 0's threads [\d.]+ / [\d.]+, [\d.]+ / [\d.]+ us", line), line
    assert re.search(r"ranks [\d.]+ / [\d.]+ us, [\d.]+ times scheduled", line), line
    assert re.search(r"executors [\d.]+ / [\d.]+ us", line), line


def test_rounds_pool_reps_and_show_each_rounds_ratio(monkeypatch):
    """--rounds: each system's reps of every round count in its figure, and the
    report shows each round's ratio (made-up figures: no runtime is started)."""
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    from bench_report import format_rounds, with_stat
    from bench_runner import Result, SystemRun, merge_rounds

    def rnd(hpc_reps, ray_reps, init):
        return {"hpc_ray": SystemRun("hpc_ray", results={
                    "actor_sync": Result("ok", max(hpc_reps), reps=hpc_reps,
                                         foreign=[0.0] * len(hpc_reps))}, init_s=init),
                "ray": SystemRun("ray", results={
                    "actor_sync": Result("ok", max(ray_reps), reps=ray_reps,
                                         foreign=[0.0] * len(ray_reps))}, init_s=init * 5)}

    rounds = [rnd([30.0, 20.0], [2.0, 2.0], 0.5), rnd([10.0, 12.0], [1.0, 1.0], 0.7),
              rnd([25.0, 26.0], [2.5, 2.5], 0.6)]
    merged = with_stat(merge_rounds(rounds), "median")
    res = merged["hpc_ray"].results["actor_sync"]
    assert res.reps == [30.0, 20.0, 10.0, 12.0, 25.0, 26.0] and res.value == 22.5
    assert merged["ray"].results["actor_sync"].value == 2.0
    assert merged["hpc_ray"].init_s == 0.6
    row = next(ln for ln in format_rounds(rounds, ["actor_sync"], "median").splitlines()
               if ln.startswith("| actor_sync"))
    assert [c.strip() for c in row.strip("|").split("|")] == \
        ["actor_sync", "hpc_ray/ray", "12.5x", "11.0x", "10.2x"]
    # A round that failed keeps its error in the pooled figure.
    bad = rnd([1.0], [1.0], 0.5)
    bad["hpc_ray"].results["actor_sync"] = Result("timeout", detail="hung")
    assert merge_rounds(rounds + [bad])["hpc_ray"].results["actor_sync"].status == "timeout"


def test_neighbour_prints_the_share_a_cpu_bound_process_keeps():
    cmd = [sys.executable, str(BENCH_DIR / "neighbour.py"), "--modes", "embedded",
           "--rounds", "1", "--window", "0.5"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("| hpc_ray | embedded |"))
    kept, _, calls, cpu = (c.strip() for c in row.strip("| \n").split("|")[2:])
    # The neighbour ran in both halves, and the job made calls while it ran.
    assert float(kept) > 0 and float(calls) > 0 and float(cpu) >= 0, res.stdout


def test_two_nodes_prints_every_row(mpiexec):
    if mpiexec.flavor != "mpich":
        pytest.skip("the fake-host launch needs MPICH's hydra mpiexec")
    cmd = [sys.executable, str(BENCH_DIR / "two_nodes.py"), "--tasks", "300",
           "--object-mb", "2", "--sizes", "65536", "--reps", "2", "--timeout", "80"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT,
                         start_new_session=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert res.stdout.startswith("launch: ") and "-hosts 127.0.0.2:3,127.0.0.3:2" in res.stdout
    rows = {r.split("|")[1].strip(): r for r in res.stdout.splitlines()
            if r.startswith("| ") and "---" not in r}
    for label in ("300 tiny tasks, tasks/s", "64 KB"):
        assert all(float(c.split()[0].replace(",", "")) > 0
                   for c in rows[label].strip("|").split("|")[1:]), rows[label]
    assert any(k.startswith("2 MB put, get on the other node") for k in rows), res.stdout
