"""hpc_ray.exceptions, in-process: the classes users catch, and pickling."""
from __future__ import annotations

import pickle

import pytest

from hpc_ray import exceptions as exc


def roundtrip(err):
    return pickle.loads(pickle.dumps(err))


def test_hierarchy():
    assert issubclass(exc.GetTimeoutError, TimeoutError)
    for cls in (exc.TaskError, exc.GetTimeoutError, exc.ObjectStoreFullError,
                exc.WorkerCrashedError):
        assert issubclass(cls, exc.RayError)
        assert issubclass(cls, Exception)
    assert issubclass(exc.RayTaskError, exc.TaskError) or exc.RayTaskError is exc.TaskError


@pytest.mark.parametrize("cls", [exc.GetTimeoutError, exc.ObjectStoreFullError,
                                 exc.WorkerCrashedError, exc.RayError])
def test_simple_exceptions_pickle(cls):
    err = cls("something happened on rank 3")
    copy = roundtrip(err)
    assert type(copy) is cls
    assert str(copy) == str(err)


def test_task_error_is_also_the_cause():
    cause = KeyError("missing")
    err = exc.TaskError(function_name="f", traceback_str="Traceback...\nKeyError: 'missing'",
                        rank=2, host="node7", cause=cause).as_instanceof_cause()
    assert isinstance(err, exc.TaskError) and isinstance(err, KeyError)
    for copy in (err, roundtrip(err), roundtrip(roundtrip(err))):
        assert isinstance(copy, exc.TaskError) and isinstance(copy, KeyError)
        assert copy.rank == 2
        assert "f" in str(copy) and "missing" in str(copy)
        assert "KeyError" in copy.traceback_str
    with pytest.raises(KeyError):
        raise err


class _KeywordOnly(Exception):
    def __init__(self, code, *, detail):
        super().__init__(code)
        self.detail = detail


@pytest.mark.parametrize("cause", [
    KeyError("missing"),
    MemoryError("hog"),            # __new__ is not safe to call on a mixed class
    OSError(2, "No such file"),    # __new__ maps errno to a subclass
    _KeywordOnly(3, detail="d"),   # __init__ does not take the TaskError fields
    UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad byte"),
], ids=lambda c: type(c).__name__)
def test_task_error_for_many_exception_classes(cause):
    """get() must be able to raise a TaskError for whatever a task raised, and
    the error must still be catchable as the original class when possible."""
    err = exc.TaskError(function_name="g", traceback_str="tb", rank=1, host="h",
                        cause=cause).as_instanceof_cause()
    assert isinstance(err, exc.TaskError)
    assert isinstance(err, type(cause))
    assert err.rank == 1 and "g" in str(err)
    copy = roundtrip(err)
    assert isinstance(copy, exc.TaskError) and isinstance(copy, type(cause))


class _WithCode(Exception):
    def __init__(self, code, msg):
        super().__init__(code, msg)
        self.code = code


def test_task_error_reads_the_causes_attributes():
    """``except MyErr as e: e.code`` works on the error get() raises (Ray's
    RayTaskError forwards unknown attributes to the cause)."""
    err = exc.TaskError(function_name="f", traceback_str="tb", rank=1, host="h",
                        cause=_WithCode(7, "seven")).as_instanceof_cause()
    for copy in (err, roundtrip(err), roundtrip(roundtrip(err))):
        assert isinstance(copy, _WithCode)
        assert copy.code == 7
        assert copy.rank == 1 and copy.function_name == "f"   # its own fields win
        with pytest.raises(AttributeError, match="no_such"):
            copy.no_such
        assert not hasattr(copy, "__no_such_dunder__")
    plain = exc.TaskError("f", "tb", 1, "h", None)
    with pytest.raises(AttributeError, match="code"):
        plain.code


def test_task_error_attribute_lookup_before_its_fields_are_set():
    # What unpickling and _instantiate see: an instance whose __init__ has not run.
    derived = type(exc.TaskError("f", "tb", 1, "h", _WithCode(1, "x")).as_instanceof_cause())
    bare = BaseException.__new__(derived)
    assert getattr(bare, "code", None) is None
    assert getattr(bare, "cause", None) is None


def _raised(make):
    try:
        make()
    except BaseException as e:   # noqa: BLE001 - the cause as a task would raise it
        return e
    raise AssertionError("nothing raised")


@pytest.mark.parametrize("make,fields", [
    (lambda: {}["k"], {"args": ("k",)}),
    (lambda: open("/nonexistent-hpc-ray/x"),
     {"errno": 2, "strerror": "No such file or directory", "filename": "/nonexistent-hpc-ray/x"}),
    (lambda: compile("def (", "f.py", "exec"), {"filename": "f.py", "lineno": 1}),
    (lambda: __import__("no_such_module_hpc_ray"), {"name": "no_such_module_hpc_ray"}),
    (lambda: b"\xff".decode("utf-8"), {"encoding": "utf-8", "start": 0, "end": 1}),
    (lambda: next(iter(())), {"args": ()}),
], ids=["KeyError", "OSError", "SyntaxError", "ImportError", "UnicodeError", "StopIteration"])
def test_task_error_has_the_causes_args_and_builtin_fields(make, fields):
    """``except KeyError as e: e.args[0]`` is the key and ``e.filename`` an OSError's
    file, as without hpc_ray: built-in exceptions keep these in C slots, which the
    mixed class has too (as None), so they are copied, not forwarded."""
    cause = _raised(make)
    err = exc.TaskError("f", "tb", 1, "h", cause).as_instanceof_cause()
    for copy in (err, roundtrip(err)):
        assert isinstance(copy, type(cause))
        assert {name: getattr(copy, name) for name in fields} == fields
        assert copy.function_name == "f" and "f failed on worker rank 1" in str(copy)


def test_task_error_of_a_task_that_failed_in_get_is_also_the_subtasks_class():
    """A task whose get() raised the TaskError(KeyError) of its subtask fails with
    that error as its cause: the driver's error is a KeyError too, with its key."""
    inner = exc.TaskError("inner", "tb", 1, "h", KeyError("k")).as_instanceof_cause()
    outer = exc.TaskError("outer", "tb2", 2, "h", roundtrip(inner)).as_instanceof_cause()
    for copy in (outer, roundtrip(outer), roundtrip(roundtrip(outer))):
        assert isinstance(copy, exc.TaskError) and isinstance(copy, KeyError)
        assert copy.args == ("k",) and copy.function_name == "outer" and copy.rank == 2
