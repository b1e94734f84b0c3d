"""A Ctrl-C at every point of a driver step where Python could raise it.

Python runs a signal handler only at certain points of the main thread
(``tests/mpi_scripts/sigint_points.py`` says which, and finds them with a trace
function). These tests deliver one SIGINT, through hpc_ray's own handler, at
the 1st, 2nd, ... such point of a step, until a step runs to its end, and check
after each that the driver still works.

- ``DriverLinks.turn`` (a driver thread reading its actors' sockets): the
  ``arrived`` lock free and the link's ``reading`` claim as it was. An interrupt inside
  ``Condition.__enter__``, after it took the lock, left the lock held, and the
  driver's next get() blocked for good: a CI hang of
  ``test_hundred_ctrl_c_during_get_then_every_result_arrives[embedded-repeat_actor]``.
- Whole user steps in a real job (``interrupt_sweep.py``): a task's ``remote``
  and ``get``, an actor call's, a ``put`` and ``get``, a ``wait``, and
  submissions that fill a batch. An interrupt inside ``Event.set`` (waking the
  comm thread) left the Event's lock held, and the comm thread blocked on it.
"""
import socket
import sys
import threading

import pytest

from conftest import SCRIPTS_DIR

sys.path.insert(0, str(SCRIPTS_DIR))
from sigint_points import run_with_sigint_at  # noqa: E402

from hpc_ray.runtime import interrupts  # noqa: E402
from hpc_ray.runtime.driver_calls import DriverLinks  # noqa: E402
from hpc_ray.runtime.peer_calls import Link  # noqa: E402
from hpc_ray.transport.direct import Channel  # noqa: E402


class _IdlePeer:
    """A caller with one link to a silent actor."""
    finished = False

    def __init__(self, link: Link) -> None:
        self.links = {link.actor_id: link}


def _direct_calls(reading: bool, actor_end: socket.socket) -> DriverLinks:
    """The driver's links with one link, read by another thread if ``reading``."""
    link = Link(1, Channel(actor_end))
    link.reading = reading
    return DriverLinks(_IdlePeer(link), {}, {link.channel.fd: link.channel},
                       threading.Lock(), None)


@pytest.mark.parametrize("reading", [False, True], ids=["reads", "waits_for_reader"])
def test_a_ctrl_c_anywhere_in_a_turn_leaves_the_next_get_free_to_run(reading):
    assert threading.current_thread() is threading.main_thread()
    n = 0
    while True:
        n += 1
        ends = socket.socketpair()
        calls = _direct_calls(reading, ends[0])
        try:
            links = list(calls.peer.links.values())
            reached, _ = run_with_sigint_at(n, lambda: calls.turn(0, lambda: links))
        finally:
            for end in ends:
                end.close()
        link = calls.peer.links[1]
        assert not interrupts._pending, f"SIGINT at point {n} still pending after the turn"
        assert not calls.arrived._lock.locked(), f"SIGINT at point {n} left the lock held"
        assert link.reading is reading, f"SIGINT at point {n} left reading={link.reading}"
        assert calls.waiting == 0, f"SIGINT at point {n} left waiting={calls.waiting}"
        if not reached:
            break
    assert n > 10, n     # the turn and threading's Condition code were reached


@pytest.mark.mpi
@pytest.mark.parametrize("what", ["task", "actor", "put", "wait", "batch"])
def test_a_ctrl_c_anywhere_in_a_step_loses_no_result_and_blocks_nothing(run, what):
    values = run("interrupt_sweep.py", 3, what, mode="embedded", timeout=120) \
        .assert_ok(f"interrupt_sweep {what}")
    assert values["points"] > 30
    assert values["interrupted"] == values["points"] - 1


def test_the_sweep_interrupts_only_where_the_interpreter_would():
    """A real SIGINT after the last call in a ``with`` block is raised inside that
    call, and ``__exit__`` runs; the sweep must not raise it one instruction later
    (outside the block), which left a lock held that a real Ctrl-C never leaves
    held: a CI hang of ``interrupt_sweep.py actor`` in ``PeerCaller.head_calls_of``."""
    lock = threading.Lock()

    def step():
        with lock:
            return len([1, 2])

    n = 0
    while True:
        n += 1
        reached, value = run_with_sigint_at(n, step)
        assert not lock.locked(), f"the SIGINT at point {n} left the lock held"
        if not reached:
            break
    assert value == 2 and n > 2   # (points interrupted, then a run to the end)


def test_ctrl_c_inside_a_refs_count_down_comes_after_it(monkeypatch):
    """A SIGINT while ``ObjectRef.__del__`` held the ref counts' lock raised there:
    the lock stayed held when it came just after the take (the next ref made, or
    ``shutdown()``, blocked for good: 2 of 3 runs of a driver sent a Ctrl-C a
    second while it submitted tasks), and ``__del__`` swallowed the
    KeyboardInterrupt (3 of 30 lost). Now it waits, and comes again after it."""
    import signal
    import time

    from hpc_ray.runtime import context
    raised = []
    real = context._count_down

    def count_down(oid):
        try:
            interrupts._on_sigint(signal.SIGINT, sys._getframe(1))   # __del__'s frame
            raised.append(False)
        except KeyboardInterrupt:
            raised.append(True)
        real(oid)

    monkeypatch.setattr(context, "_count_down", count_down)
    old = signal.signal(signal.SIGINT, interrupts._on_sigint)
    try:
        with pytest.raises(KeyboardInterrupt):
            ref = context.ObjectRef(10**6)
            del ref
            check = raised == [False] and not context._refs_lock.locked()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, old)
    assert check, raised


def test_a_ctrl_c_while_init_starts_the_workers_leaves_none_of_them(tmp_path):
    # The spawned launcher and ranks kept running (each at a quarter of a core,
    # with MPI's /dev/shm segment) after an Interrupt during init() in a notebook.
    # A SIGINT every 0.1 s from 0.2 s after init() began lands in the spawn or in
    # the set-up that follows, whichever this machine is in then.
    import signal
    import subprocess
    import time
    out_path, err_path = tmp_path / "out", tmp_path / "err"
    # (Files, not pipes: a rank left running would hold a pipe open.)
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, str(SCRIPTS_DIR / "interrupted_init.py")],
                                stdout=out, stderr=err, cwd=str(SCRIPTS_DIR),
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while "INIT START" not in out_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        while proc.poll() is None and time.monotonic() < deadline and not \
                {"INTERRUPTED", "INIT DONE"} & set(out_path.read_text().splitlines()):
            proc.send_signal(signal.SIGINT)
            time.sleep(0.1)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = out_path.read_text() + err_path.read_text()
    assert "\nCHILDREN 0 " in text, text
    assert "INTERRUPTED" in text or "INIT DONE" in text, text


def test_the_ctrl_c_handler_is_back_in_each_notebook_cell():
    pytest.importorskip("IPython")
    import subprocess
    out = subprocess.run([sys.executable, str(SCRIPTS_DIR / "notebook_sigint.py")],
                         capture_output=True, text=True, timeout=120, cwd=str(SCRIPTS_DIR))
    assert "HANDLER True True 42" in out.stdout, out.stdout + out.stderr
