"""Functions and classes shipped by value keep their source file, so a remote
traceback shows the user's lines (cloudpickle 3.1.3 renames every such code
object's file "<dynamic-code>")."""
from __future__ import annotations

import contextlib
import importlib.util
import json
import pickle
import subprocess
import sys
import traceback

import cloudpickle
import pytest

from hpc_ray.transport.serialization import dumps, serialize

SOURCE = '''
def fails(x):
    helper = lambda v: 1 / v
    return helper(x)


class Model:
    def step(self):
        raise ValueError("bad step")
'''


@contextlib.contextmanager
def module_by_value(tmp_path, name: str, source: str):
    """``source`` as module ``name``, pickled by value as cloudpickle treats __main__."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    cloudpickle.register_pickle_by_value(mod)
    try:
        yield mod, str(path)
    finally:
        cloudpickle.unregister_pickle_by_value(mod)
        del sys.modules[spec.name]


@pytest.fixture
def by_value_module(tmp_path):
    with module_by_value(tmp_path, "user_code_by_value", SOURCE) as got:
        yield got


def frames_of(call, path: str) -> list[str]:
    """The source lines of ``path`` in the traceback of ``call()``."""
    try:
        call()
    except Exception as exc:
        return [f.line for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    raise AssertionError("no exception")


def test_a_function_sent_by_value_keeps_its_file_and_lines(by_value_module):
    mod, path = by_value_module
    fails = pickle.loads(dumps(mod.fails))
    assert fails is not mod.fails
    assert frames_of(lambda: fails(0), path) == ["return helper(x)", "helper = lambda v: 1 / v"]


LOAD_AND_STEP = """
import json, pickle, sys, traceback
cls = pickle.loads(sys.stdin.buffer.read())["cls"]
try:
    cls().step()
except ValueError as exc:
    print(json.dumps([(f.filename, f.line) for f in traceback.extract_tb(exc.__traceback__)]))
"""


def test_a_class_sent_inside_a_value_keeps_its_file_in_another_process(by_value_module):
    mod, path = by_value_module
    s = serialize({"cls": mod.Model})
    assert not s.buffers
    out = subprocess.run([sys.executable, "-c", LOAD_AND_STEP], input=s.data,
                         capture_output=True, timeout=60, check=True)
    frames = json.loads(out.stdout)
    assert frames[-1] == [path, 'raise ValueError("bad step")'], out


SLOTTED = '''
import typing


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a, self.b = a, b


class OneSlot:
    __slots__ = "a"


class Point(typing.NamedTuple):
    x: float
    y: float = 0.0


def make():
    return Slotted(1, 2)


def make_point():
    return Point(1.5)
'''

MAKE_AND_SEND_BACK = """
import pickle, sys
from hpc_ray.transport.serialization import dumps
make = pickle.loads(sys.stdin.buffer.read())
sys.stdout.buffer.write(dumps(make()))
"""


def test_an_instance_of_a_slotted_class_sent_by_value_comes_back(tmp_path):
    # A __main__ class with __slots__, made in a task and returned: the copy
    # cloudpickle 3.1.3 builds in the worker had no slots, its instances a
    # __dict__, and the driver's class could not take their state.
    with module_by_value(tmp_path, "slotted_by_value", SLOTTED) as (mod, _):
        copy = pickle.loads(dumps(mod.OneSlot))
        assert not hasattr(copy(), "__dict__")
        out = subprocess.run([sys.executable, "-c", MAKE_AND_SEND_BACK], input=dumps(mod.make),
                             capture_output=True, timeout=60, check=True)
        back = pickle.loads(out.stdout)
        assert type(back) is mod.Slotted and (back.a, back.b) == (1, 2)


def test_a_typing_namedtuple_sent_by_value_comes_back(tmp_path):
    # Its class has empty __slots__, which typing.NamedTuple's metaclass refuses
    # when they are given at the class's making: every put, argument and result
    # of one defined in the script raised AttributeError.
    with module_by_value(tmp_path, "namedtuple_by_value", SLOTTED) as (mod, _):
        assert pickle.loads(dumps([mod.Point(1.0, 2.0)])) == [(1.0, 2.0)]
        out = subprocess.run([sys.executable, "-c", MAKE_AND_SEND_BACK],
                             input=dumps(mod.make_point), capture_output=True, timeout=60,
                             check=True)
        back = pickle.loads(out.stdout)
        assert type(back) is mod.Point and back == (1.5, 0.0) and back.y == 0.0


def test_a_large_remote_function_or_actor_class_is_warned_of():
    """Ray 0.7 warns of a definition over 10 MB pickled: most often a large array
    that it refers to, sent to every process that runs it."""
    import warnings

    import numpy as np

    import hpc_ray as ray

    big = np.ones(11 * 10 ** 6 // 8)

    def uses_big():
        return float(big[0])

    class HoldsBig:
        def first(self):
            return float(big[0])

    def small():
        return 1

    ray.init(local_mode=True)
    try:
        with pytest.warns(UserWarning, match=r"remote function \S*uses_big has size \d+ when "
                                             r"pickled.*large array"):
            assert ray.get(ray.remote(uses_big).remote()) == 1.0
        with pytest.warns(UserWarning, match=r"actor class \S*HoldsBig has size \d+"):
            assert ray.get(ray.remote(HoldsBig).remote().first.remote()) == 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert ray.get(ray.remote(small).remote()) == 1
    finally:
        ray.shutdown()


def test_an_arrays_dtype_keeps_its_metadata():
    # An HDF5 enum's type is an int dtype with metadata: rebuilt from the dtype's
    # string, a task that read one handed back a plain int8 array (and so did put).
    h5py = pytest.importorskip("h5py")
    import numpy as np

    from hpc_ray.transport.serialization import deserialize_inline

    colors = h5py.enum_dtype({"RED": 0, "GREEN": 1}, basetype="i1")
    array = np.array([0, 1, 1], dtype=colors)
    for value in (array, [array, array[1:]], np.zeros((200, 100), dtype=colors)):
        back = deserialize_inline(serialize(value).inline_record())
        for got, sent in zip(back if isinstance(back, list) else [back],
                             value if isinstance(value, list) else [value]):
            assert h5py.check_enum_dtype(got.dtype) == {"RED": 0, "GREEN": 1}
            assert np.array_equal(got, sent)
    plain = serialize(np.zeros((200, 100)))
    assert plain.buffers, "a plain array's data stays out of band"
    assert serialize(np.zeros((200, 100), dtype=colors)).buffers, "so does one with metadata"
