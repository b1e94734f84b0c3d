"""Bad input gives a clear exception in the caller, and the runtime keeps working."""
import errno, faulthandler, os
faulthandler.dump_traceback_later(float(os.environ.get("HPC_RAY_TEST_TIMEOUT", "60")) - 5, exit=True)

import pickle
import threading

from _harness import NP, check, expect_raises, init_kwargs, ok, report, section

import hpc_ray as ray
from hpc_ray.exceptions import RayError, TaskError

ray.init(**init_kwargs())


class BadReduce:
    def __reduce__(self):
        raise RuntimeError("boom in __reduce__")


class Unpicklable:
    def __init__(self):
        self.lock = threading.Lock()


@ray.remote
def identity(x):
    return x


@ray.remote
def return_bad():
    return BadReduce()


@ray.remote
def return_lock():
    return threading.Lock()


@ray.remote
def add(a, b):
    return a + b


def still_works():
    check(ray.get(add.remote(ray.put(1), 2)) == 3)


def call_site(fn, *args):
    """Run a submission and its get; return (where it failed, the exception)."""
    try:
        ref = fn(*args)
    except Exception as err:
        return "submit", err
    try:
        value = ray.get(ref, timeout=30)
    except Exception as err:
        return "get", err
    raise AssertionError(f"no error, got {value!r}")


seen = {}

# --- unpicklable arguments and return values ----------------------------------

with section("unpicklable"):
    for name, value in [("arg_bad_reduce", BadReduce()), ("arg_lock", Unpicklable())]:
        where, err = call_site(identity.remote, value)
        check(not isinstance(err, ray.exceptions.GetTimeoutError), repr(err))
        seen[name] = [where, type(err).__name__, str(err)[:500]]
        still_works()
    where, err = call_site(lambda v: ray.put(v), BadReduce())
    seen["put_bad_reduce"] = [where, type(err).__name__, str(err)[:500]]
    still_works()

    for name, fn in [("ret_bad_reduce", return_bad), ("ret_lock", return_lock)]:
        where, err = call_site(fn.remote)
        check(where == "get", (where, err))
        check(isinstance(err, RayError), repr(err))
        seen[name] = [where, type(err).__name__, str(err)[:2000]]
        still_works()
    report("unpicklable", seen)

# --- get and wait misuse --------------------------------------------------------

with section("get and wait misuse"):
    for bad in (1, "abc", None, [1, 2], [ray.put(1), "x"]):
        err = expect_raises(Exception, ray.get, bad)
        check(isinstance(err, TypeError), (bad, err))
    ref = ray.put(1)
    err = expect_raises(Exception, ray.wait, [ref, ref])
    check(isinstance(err, ValueError), repr(err))
    err = expect_raises(Exception, ray.wait, ref)
    check(isinstance(err, TypeError), repr(err))
    err = expect_raises(Exception, ray.wait, [ref], num_returns=0)
    check(isinstance(err, (ValueError, TypeError)), f"wait(num_returns=0) must raise (as Ray does), got {err!r}")
    still_works()

# --- bad options ----------------------------------------------------------------

with section("bad options"):
    err = expect_raises(Exception, lambda: ray.remote(not_an_option=1)(lambda: 1))
    check(isinstance(err, (ValueError, TypeError)), repr(err))
    report("unknown_option_message", str(err))
    err = expect_raises(Exception, ray.remote, 1, 2)
    check(isinstance(err, (ValueError, TypeError)), repr(err))
    err = expect_raises(Exception, add.options, not_an_option=1)
    check(isinstance(err, (ValueError, TypeError)), repr(err))
    # (num_returns=0 is Ray's "run it, return None": tests/test_newer_ray_names.py.)
    err = expect_raises(Exception, lambda: ray.remote(num_returns=-1)(lambda: 1))
    check(isinstance(err, ValueError), repr(err))
    where, err = call_site(add.remote, 1, 2, 3)  # wrong arity: at submission or at get
    check(isinstance(err, TypeError), repr(err))
    still_works()

# --- num_returns that does not match --------------------------------------------


@ray.remote(num_returns=2)
def gives_three():
    return 1, 2, 3


@ray.remote(num_returns=2)
def gives_int():
    return 7


with section("num_returns mismatch"):
    for name, fn in (("gives_three", gives_three), ("gives_int", gives_int)):
        refs = fn.remote()
        check(len(refs) == 2)
        for r in refs:
            err = expect_raises(Exception, ray.get, r, timeout=30)
            check(isinstance(err, RayError) and not isinstance(err, ray.exceptions.GetTimeoutError),
                  repr(err))
            check(name in str(err), str(err))
            check("2" in str(err), str(err))
    still_works()

# --- a task that raises, and tasks downstream of it ---------------------------


class CustomError(Exception):
    def __init__(self, code, detail):
        super().__init__(code, detail)
        self.code = code


@ray.remote(max_retries=0)
def interrupts_itself():
    raise KeyboardInterrupt  # E-KBI


@ray.remote
def fails(x):
    if x > 0:
        raise ValueError(f"bad value {x}")
    return x


@ray.remote
def raises_custom():
    raise CustomError(42, "custom detail")


@ray.remote
def downstream(x):
    return x + 1


with section("task raises"):
    err = expect_raises(Exception, ray.get, fails.remote(5))
    check(isinstance(err, TaskError) and isinstance(err, ValueError), type(err).__mro__)
    check(isinstance(err, ray.exceptions.RayTaskError),
          f"`except ray.exceptions.RayTaskError` does not catch a task's error: {type(err).__mro__}")
    check(1 <= err.rank < NP, err.rank)
    check("fails" in str(err) and "bad value 5" in str(err), str(err))
    check("raise ValueError" in err.traceback_str, err.traceback_str)
    report("task_error_str", str(err)[:3000])
    copy = pickle.loads(pickle.dumps(err))
    check(isinstance(copy, TaskError) and isinstance(copy, ValueError), type(copy).__mro__)
    check(copy.rank == err.rank and "bad value 5" in str(copy))

    chained = downstream.remote(downstream.remote(fails.remote(3)))
    err = expect_raises(Exception, ray.get, chained)
    check(isinstance(err, TaskError) and isinstance(err, ValueError), type(err).__mro__)
    check("bad value 3" in str(err), str(err))
    report("chained_error_str", str(err)[:3000])

    # A KeyboardInterrupt a task raised is a RuntimeError in the caller (not its
    # own Ctrl-C), with the traceback of where it was raised.
    err = expect_raises(TaskError, ray.get, interrupts_itself.remote())
    check(isinstance(err, RuntimeError) and not isinstance(err, KeyboardInterrupt)
          and "raise KeyboardInterrupt  # E-KBI" in str(err), str(err))

    err = expect_raises(Exception, ray.get, [fails.remote(0), fails.remote(9)])
    check(isinstance(err, ValueError) and "bad value 9" in str(err), repr(err))

    err = expect_raises(Exception, ray.get, raises_custom.remote())
    check(isinstance(err, TaskError) and isinstance(err, CustomError),
          f"a task raised CustomError(code, detail); get() raised {type(err).__mro__}: {err}")
    check("custom detail" in str(err), str(err))
    # The original exception's attributes, read through the error get() raised.
    try:
        ray.get(downstream.remote(raises_custom.remote()))
    except CustomError as caught:
        check(getattr(caught, "code", None) == 42, f"except CustomError as e: e.code -> "
              f"{getattr(caught, 'code', AttributeError)!r}")
        copy = pickle.loads(pickle.dumps(caught))
        check(getattr(copy, "code", None) == 42 and isinstance(copy, CustomError), repr(copy))

    # Errors are values: wait() reports a failed task as ready.
    failed = fails.remote(1)
    ready, _ = ray.wait([failed], timeout=30)
    check(ready == [failed])
    still_works()

# --- errors printed in the background of the driver (Ray 0.2's "Viewing errors") ---


@ray.remote
def unwatched(tag):
    raise KeyError(tag)


@ray.remote
def gets_inside(refs):
    return ray.get(refs[0])   # (in a list: a get in the task, not an argument's error)


@ray.remote
class Failing:
    def method(self, tag):
        raise LookupError(tag)


@ray.remote
class BrokenActor:
    def __init__(self, tag):
        raise KeyError(tag)

    def method(self, x):
        return x


with section("errors printed"):
    # Nobody gets this one: its error is printed all the same (the test reads stderr).
    ready, _ = ray.wait([unwatched.remote("E-UNWATCHED")], timeout=30)
    check(len(ready) == 1)
    # Printed once where it was raised, not again by the tasks it failed: as
    # their argument, or raised by their get().
    first = unwatched.remote("E-PASSED-ON")
    expect_raises(KeyError, ray.get, [downstream.remote(first), gets_inside.remote([first])],
                  timeout=30)
    expect_raises(LookupError, ray.get, Failing.remote().method.remote("E-ACTOR"), timeout=30)
    # An actor's constructor that raised: printed, and listed by errors().
    broken = BrokenActor.remote("E-CTOR")
    expect_raises(ray.exceptions.RayActorError, ray.get, broken.method.remote("x"), timeout=30)
    listed = [e for e in ray.errors() if "E-CTOR" in e["message"]]
    check(len(listed) == 1 and listed[0]["type"] == "task", ray.errors())
    # errors() gives the error itself, traceback and all (Ray 0.2: "a list
    # containing the error message").
    unwatched_errors = [e["message"] for e in ray.errors() if e.get("function") == "unwatched"]
    check(any("KeyError: 'E-UNWATCHED'" in text and "Traceback" in text
              for text in unwatched_errors), unwatched_errors)
    # A task failed by its argument's error never ran: errors() says so (not "rank -1").
    passed_on = [e["message"] for e in ray.errors() if e.get("function", "").endswith("downstream")]
    check(passed_on and all(m.startswith("task downstream failed before it ran;")
                            for m in passed_on), passed_on)


@ray.remote
def raises_builtin(kind):
    if kind == "key":
        return {}["E-KEY"]
    if kind == "file":
        return open("/nonexistent-hpc-ray/E-FILE")
    raise StopIteration(7)


@ray.remote
def gets_builtin(kind):
    return ray.get(raises_builtin.remote(kind), timeout=30)


def raised_by(kind, cls, task=raises_builtin):
    try:
        ray.get(task.remote(kind), timeout=30)
    except cls as e:
        return e
    return None


class LoadsOnlyHere:
    """A global that pickles, but cannot be rebuilt in another process."""

    def __reduce__(self):
        return (rebuild_here, (os.getpid(),))


def rebuild_here(pid):
    if os.getpid() != pid:
        raise RuntimeError("E-NOT-HERE")
    return LoadsOnlyHere()


ONLY_HERE = LoadsOnlyHere()


@ray.remote
def uses_only_here():
    return ONLY_HERE is not None


with section("a function whose globals cannot be rebuilt in a worker"):
    # The error says what could not be loaded, and why, not only the unpickler's.
    err = expect_raises(TypeError, ray.get, uses_only_here.remote(), timeout=30)
    check("could not load uses_only_here on worker rank" in str(err)
          and "RuntimeError: E-NOT-HERE" in str(err), str(err))


with section("built-in exceptions keep their fields"):
    # `except KeyError as e: e.args[0]` is the missing key, as without hpc_ray;
    # OSError's errno and filename and StopIteration's value live in C slots.
    key = raised_by("key", KeyError)
    check(key is not None and key.args == ("E-KEY",), key and key.args)
    missing = raised_by("file", FileNotFoundError)
    check(missing is not None and missing.errno == errno.ENOENT
          and missing.filename == "/nonexistent-hpc-ray/E-FILE",
          missing and (missing.errno, missing.filename))
    stop = raised_by("stop", StopIteration)
    check(stop is not None and stop.value == 7 and stop.args == (7,), stop and stop.args)
    # Raised in a subtask that a task waited for: the same class and args.
    deeper = raised_by("key", KeyError, gets_builtin)
    check(deeper is not None and deeper.args == ("E-KEY",)
          and deeper.function_name.endswith("gets_builtin"), deeper and deeper.args)

ray.shutdown()
ok("bad_input")
