"""Issue 3 API semantics: remote/options, arguments, get/put/wait, ObjectRef,
nested tasks on a pool of two workers."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("mode,n", [
    ("embedded", 3),
    ("mpiexec", 3),
    ("module", 3),
    ("mpiexec", 5),
])
def test_api_semantics(run, mode, n):
    result = run("api_semantics.py", n, mode=mode, timeout=90)
    values = result.assert_ok("api_semantics")
    assert values["nested"] == "done"
    assert "dup" in values["wait_duplicates_message"].lower(), values
