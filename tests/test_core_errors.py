"""Issue 3 bad input: a clear exception in the caller and a runtime that keeps
working (unpicklable values, misuse of get/wait, bad options, num_returns that
does not match, tasks that raise)."""
from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("mode,n", [("embedded", 3), ("mpiexec", 3), ("module", 5)])
def test_bad_input(run, mode, n):
    result = run("bad_input.py", n, mode=mode, timeout=90)
    values = result.assert_ok("bad_input")
    unpicklable = values["unpicklable"]
    # Arguments are pickled in the caller: the error comes from .remote()/put().
    for key in ("arg_bad_reduce", "arg_lock", "put_bad_reduce"):
        where, _kind, message = unpicklable[key]
        assert where == "submit", (key, unpicklable[key])
    assert "boom in __reduce__" in unpicklable["arg_bad_reduce"][2]
    assert "boom in __reduce__" in unpicklable["put_bad_reduce"][2]
    assert "lock" in unpicklable["arg_lock"][2].lower(), unpicklable["arg_lock"]
    # Return values are pickled on the worker: get() raises, naming the function.
    assert "boom in __reduce__" in unpicklable["ret_bad_reduce"][2]
    assert "return_bad" in unpicklable["ret_bad_reduce"][2]
    assert "return_lock" in unpicklable["ret_lock"][2]
    assert "not_an_option" in values["unknown_option_message"]
    # The remote traceback and the function's name reach the caller, through a chain.
    assert "fails" in values["task_error_str"]
    assert "raise ValueError" in values["chained_error_str"]
    # A task's error is printed on the driver's stderr, got or not (Ray 0.2:
    # "that exception will be printed in the background of the driver
    # process"), once: not again by the tasks its error failed.
    for last in ("KeyError: 'E-UNWATCHED'", "KeyError: 'E-PASSED-ON'",
                 "LookupError: E-ACTOR", "KeyError: 'E-CTOR'"):
        printed = re.findall(rf"^\(pid=\d+, rank=\d+\) {re.escape(last)}$", result.stderr, re.M)
        assert len(printed) == 1, (last, result.output())
