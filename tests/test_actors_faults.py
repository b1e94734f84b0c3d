"""Issue 4 actor faults: the actor's process dies under a method (os._exit and a
real segfault). With max_restarts=1 the actor comes back (constructor again, new
pid, fresh state) and only the lost call raises ActorDiedError; without restarts
every later call does; an actor killed with calls queued fails all of them.

The rank script is tests/mpi_scripts/actors_faults.py."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.mpi, pytest.mark.faults]


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3), ("module", 5)])
def test_actor_faults(run, mode, n):
    result = run("actors_faults.py", n, mode=mode, timeout=120)
    values = result.assert_ok("actors_faults")
    messages = values["crash_messages"]
    assert set(messages) == {"restart_exit", "restart_segv", "dead_exit", "dead_segv"}
    # The error says which actor and call were lost, and how the process died.
    for key, text in messages.items():
        assert "Fragile" in text, (key, text)
    assert "SIGSEGV" in messages["restart_segv"] or "signal" in messages["restart_segv"]
    assert "exit" in messages["dead_exit"]
    # Actors created and dropped at once were never started, so none had to be
    # killed for cleaning up too long.
    assert "still cleaning up" not in result.stderr, result.output()
