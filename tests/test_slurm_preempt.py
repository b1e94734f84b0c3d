"""hpc_ray.preempt: hooks run on the signals Slurm sends, in real processes.

Each case runs a small Python program in a subprocess and signals it, so the
handler, the main-thread rule, the exit status and atexit clean-up are real.  The
last test runs examples/checkpoint_resume.py on 3 MPI ranks, stops it with USR1
and resumes it, as the requeue template does on Slurm.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import h5py
import pytest

from hpc_ray import preempt
from hpc_ray.mpirun import mpiexec_argv

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import atexit, os, signal, sys, threading, time
from hpc_ray import preempt

def say(text):
    os.write(1, (text + "\\n").encode())   # safe inside a signal handler

@preempt.on_preempt
def first():
    say(f"first in main thread: {threading.current_thread() is threading.main_thread()}")

def second():
    say("second")
assert preempt.on_preempt(second) is second

atexit.register(say, "atexit ran")
assert preempt.install_preempt_handler()
assert preempt.install_preempt_handler()   # twice is harmless
say(f"ready {os.getpid()}")
deadline = time.monotonic() + 20
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.01)
say(f"preempted: {preempt.preempted()}")
"""


@pytest.fixture
def scratch():
    with tempfile.TemporaryDirectory(prefix="hpc_ray-test-") as d:
        yield Path(d)


def start(scratch: Path, program: str, *, env: dict | None = None) -> subprocess.Popen:
    script = scratch / "prog.py"
    script.write_text(textwrap.dedent(program))
    proc = subprocess.Popen([sys.executable, str(script), str(scratch / "go")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})), start_new_session=True)
    line = proc.stdout.readline()
    assert line.startswith("ready"), line + proc.communicate(timeout=30)[1]
    return proc


def finish(proc: subprocess.Popen, scratch: Path, timeout: float = 30):
    (scratch / "go").touch()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"program did not end:\n{out}\n{err}")
    return proc.returncode, out.splitlines(), err


def signal_and_wait_for(proc, sig, expected_line, timeout=30):
    os.kill(proc.pid, sig)
    return wait_for_line(proc, expected_line, timeout, f" after {sig!r}")


def wait_for_line(proc, expected_line, timeout=30, after=""):
    deadline = time.monotonic() + timeout
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if lines[-1] == expected_line:
            return lines
    pytest.fail(f"no {expected_line!r}{after}; got {lines}")


@pytest.mark.timeout(60)
def test_usr1_runs_every_hook_once_in_the_main_thread(scratch):
    proc = start(scratch, PROGRAM)
    lines = signal_and_wait_for(proc, signal.SIGUSR1, "second")
    os.kill(proc.pid, signal.SIGUSR1)  # a second warning runs nothing again
    rc, rest, err = finish(proc, scratch)
    assert lines == ["first in main thread: True", "second"]
    assert (rc, rest) == (0, ["preempted: True", "atexit ran"]), err


@pytest.mark.timeout(60)
def test_sigterm_runs_the_hooks_then_exits_143_after_atexit(scratch):
    proc = start(scratch, PROGRAM)
    os.kill(proc.pid, signal.SIGTERM)
    rc, lines, err = finish(proc, scratch)
    assert rc == 128 + signal.SIGTERM, err
    assert lines == ["first in main thread: True", "second", "atexit ran"]


@pytest.mark.timeout(60)
def test_warning_then_termination_runs_the_hooks_once(scratch):
    proc = start(scratch, PROGRAM)
    signal_and_wait_for(proc, signal.SIGUSR1, "second")
    os.kill(proc.pid, signal.SIGTERM)
    rc, lines, err = finish(proc, scratch)
    assert (rc, lines) == (143, ["atexit ran"]), err


@pytest.mark.timeout(60)
def test_a_failing_hook_is_logged_and_the_next_still_runs(scratch):
    proc = start(scratch, PROGRAM.replace('say("second")', 'say("second"); 1 / 0', 1)
                 .replace("assert preempt.on_preempt(second) is second",
                          "preempt.on_preempt(second); preempt.on_preempt(lambda: say('third'))"))
    signal_and_wait_for(proc, signal.SIGUSR1, "third")
    rc, lines, err = finish(proc, scratch)
    assert rc == 0
    assert "hpc_ray: preemption hook second failed" in err
    assert "ZeroDivisionError: division by zero" in err


@pytest.mark.timeout(60)
def test_pid_file_names_the_driver_and_goes_at_exit(scratch):
    pidfile = scratch / "driver.pid"
    proc = start(scratch, PROGRAM, env={"HPC_RAY_DRIVER_PIDFILE": str(pidfile)})
    assert pidfile.read_text() == f"{proc.pid}\n"
    rc, _, err = finish(proc, scratch)
    assert rc == 0, err
    assert not pidfile.exists()


@pytest.mark.timeout(60)
def test_a_worker_that_ignores_the_warning_survives_it(scratch):
    proc = start(scratch, """
        import os, subprocess, sys, time
        from hpc_ray import preempt
        preempt.ignore_preempt_signals()
        # A child started afterwards (an executor) ignores it too.
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(f"ready {child.pid}", flush=True)
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.01)
        child.kill()
        print("survived", flush=True)
    """)
    os.killpg(proc.pid, signal.SIGUSR1)  # the whole process group, as srun would
    rc, lines, err = finish(proc, scratch)
    assert (rc, lines) == (0, ["survived"]), err


def test_requeue_count_comes_from_slurm_restart_count(monkeypatch):
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    assert (preempt.requeue_count(), preempt.is_requeued()) == (0, False)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert (preempt.requeue_count(), preempt.is_requeued()) == (2, True)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "junk")
    assert preempt.requeue_count() == 0


def test_on_preempt_needs_a_callable():
    with pytest.raises(TypeError, match="on_preempt needs a callable, got 3"):
        preempt.on_preempt(3)


def test_no_handler_outside_the_main_thread():
    import threading
    result = []
    t = threading.Thread(target=lambda: result.append(preempt.install_preempt_handler()))
    t.start()
    t.join(10)
    assert result == [False]
    assert signal.getsignal(signal.SIGUSR1) is not preempt._handle


# --- the example, on 3 ranks, without Slurm ------------------------------------------


@pytest.mark.timeout(120)
def test_example_checkpoints_on_usr1_and_resumes(scratch):
    steps, tasks = 30, 4
    expected = sum((s * 31 + i * 7) % 101 for s in range(steps) for i in range(tasks))
    ckpt, pidfile = scratch / "run.h5", scratch / "driver.pid"
    argv = mpiexec_argv(3, [sys.executable, "-m", "hpc_ray",
                            str(ROOT / "examples" / "checkpoint_resume.py"),
                            "--steps", str(steps), "--tasks", str(tasks),
                            "--checkpoint", str(ckpt)])
    env = dict(os.environ, HPC_RAY_DRIVER_PIDFILE=str(pidfile))

    def run(step_seconds: str, stop_after: str | None):
        proc = subprocess.Popen(argv + ["--step-seconds", step_seconds], cwd=scratch, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line.rstrip("\n"))
                if lines[-1] == stop_after:
                    os.kill(int(pidfile.read_text()), signal.SIGUSR1)
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("the example hung:\n" + "\n".join(lines))
        assert proc.returncode == 0, "\n".join(lines) + err
        return lines

    first = run("0.2", stop_after="step 3 done")
    stopped = int(re.fullmatch(r"checkpointed at step (\d+) to .*; stopping", first[-1])[1])
    assert 4 <= stopped < steps
    assert not pidfile.exists()
    second = run("0", stop_after=None)
    assert second[0] == f"resumed from step {stopped} of {steps} (job requeued 0 times)"
    assert second[-1] == f"done: {steps} steps, total {expected}"
    done = [int(m[1]) for m in (re.fullmatch(r"step (\d+) done", l) for l in first + second)
            if m]
    assert done == list(range(steps))
    with h5py.File(ckpt, "r") as f:
        assert f.attrs["next_step"] == steps


@pytest.mark.timeout(90)
def test_drivers_of_two_job_steps_share_the_pid_file(scratch):
    # Two `srun ... &` steps of one batch script inherit one HPC_RAY_DRIVER_PIDFILE:
    # the second driver overwrote the first's pid, and removed the file when it
    # ended, so Slurm's warning reached neither. Each now adds and removes its line,
    # and the templates' trap signals every pid in the file.
    pidfile = scratch / "driver.pid"
    env = {"HPC_RAY_DRIVER_PIDFILE": str(pidfile)}
    (scratch / "a").mkdir()
    (scratch / "b").mkdir()
    first = start(scratch / "a", PROGRAM, env=env)
    second = start(scratch / "b", PROGRAM, env=env)
    assert pidfile.read_text() == f"{first.pid}\n{second.pid}\n"
    rc, lines, err = finish(second, scratch / "b")
    assert (rc, lines) == (0, ["preempted: False", "atexit ran"]), err
    assert pidfile.read_text() == f"{first.pid}\n"
    trap = [line.strip() for line in (ROOT / "slurm" / "one_node.sbatch").read_text()
            .splitlines() if "kill -USR1" in line]
    assert len(trap) == 1, trap
    subprocess.run(["bash", "-c", trap[0]], env=dict(os.environ, **env), check=True, timeout=30)
    wait_for_line(first, "second")
    rc, lines, err = finish(first, scratch / "a")
    assert (rc, lines) == (0, ["preempted: True", "atexit ran"]), err
    assert not pidfile.exists()

