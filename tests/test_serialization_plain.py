"""Plain data (numbers, strings, numpy arrays, small containers of them) is pickled
by the standard pickler, not cloudpickle (``serialization._plain``): the values
that come back must be the ones cloudpickle brought back, array for array, and
everything else must still go through cloudpickle."""
from __future__ import annotations

import copyreg
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hpc_ray.actors import ActorHandle
from hpc_ray.remote_function import arg_check
from hpc_ray.runtime.context import ObjectRef
from hpc_ray.transport import serialization
from hpc_ray.transport.serialization import NOT_PLAIN, PLAIN, PLAIN_NUMPY, WITH_REFS, serialize


def round_trip(value):
    """``value`` as a reader of its record gets it (buffers as bytes, as inline)."""
    s = serialize(value)
    return pickle.loads(s.data, buffers=[bytes(b) for b in s.buffers])


def same(a, b) -> bool:
    """Equal values of the same types, arrays with the same dtype, shape and data
    (NaNs equal to themselves)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and \
            a.tobytes() == np.ascontiguousarray(b).tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and a != a:
        return b != b
    return a == b


ARRAYS = [
    np.zeros(10), np.arange(3000, dtype=np.int32), np.zeros((0, 3)), np.zeros(0),
    np.ones((3, 4), order="F"),                       # not C-contiguous: numpy's own way
    np.arange(12).reshape(3, 4)[:, 1],                # a strided view
    np.zeros(3, dtype=[("a", "f8"), ("b", "i4")]),    # records: numpy's own way
    np.array(["ab", "c"]), np.arange(4, dtype=">i4"), np.array([1 + 2j]),
    np.array(["2020-01-01"], dtype="datetime64[D]"), np.array([True, False]),
    np.float64(2.5), np.int8(-3), np.bool_(True), np.datetime64("2020-01-01"),
    np.complex64(1 - 1j), np.float16(0.5),
]


@pytest.mark.parametrize("value", ARRAYS, ids=lambda v: f"{type(v).__name__}-{v.dtype}")
def test_numpy_values_come_back_as_they_went(value):
    assert serialization._plain(value) == PLAIN_NUMPY
    back = round_trip(value)
    assert same(value, back), (value, back)
    assert same(pickle.loads(cloudpickled(value)), back)


def cloudpickled(value) -> bytes:
    import cloudpickle
    return cloudpickle.dumps(value, protocol=5)


def test_a_large_array_travels_out_of_band_without_a_copy():
    """Its data is a buffer of its own (written into the store at its offset),
    not part of the pickle stream."""
    a = np.arange(1 << 20, dtype=np.float64)
    s = serialize(a)
    assert len(s.data) < 200
    assert [b.nbytes for b in s.buffers] == [a.nbytes]
    view = pickle.loads(s.data, buffers=[memoryview(bytearray(s.buffers[0]))])
    assert view.base is not None and np.array_equal(view, a)


@pytest.mark.parametrize("value", [
    1, 2.5, "text", b"x" * 5000, None, True, 3j, (1.5, "abc", 3), [1, [2, [3]]],
    {"a": 1, "b": (2, 3.0)}, ([np.zeros(5)], {}), {"w": np.zeros(100), "b": np.zeros(10)},
])
def test_plain_containers_come_back_as_they_went(value):
    assert serialization._plain(value) in (PLAIN, PLAIN_NUMPY)
    assert same(value, round_trip(value))


class Local:
    def __init__(self, x):
        self.x = x


@pytest.mark.parametrize("value", [
    Local(1), [Local(1)], {"k": Local(1)}, lambda: 1, np.array([Local(1)], dtype=object),
    list(range(serialization.PLAIN_ITEMS + 1)), {i: i for i in range(serialization.PLAIN_ITEMS)},
    type("IntSub", (int,), {})(3), np.ma.masked_array([1, 2], mask=[0, 1]),
], ids=["object", "list-of-object", "dict-of-object", "lambda", "object-array",
        "long-list", "big-dict", "int-subclass", "masked-array"])
def test_everything_else_goes_through_cloudpickle(value):
    assert serialization._plain(value) == NOT_PLAIN
    back = round_trip(value)
    assert type(back).__name__ == type(value).__name__


def test_refs_inside_a_value_are_still_collected():
    ref = ObjectRef(12345, _owned=False)
    s = serialize([np.zeros(3), ref])
    assert s.contained == [12345]
    assert serialize([np.zeros(3), 1]).contained == []


def a_handle(actor_id: int, lifetime_id: int) -> ActorHandle:
    def inc(self, by):
        return by
    return ActorHandle(actor_id, "Counter", {"inc": (1, 0)},
                       {"inc": arg_check(inc, "Counter.inc", drop_first=True)},
                       ObjectRef(lifetime_id, _owned=False))


def test_refs_and_actor_handles_go_by_the_standard_pickler_with_their_refs_collected():
    """A task that takes an actor handle or a list of refs is pickled without
    cloudpickle, and the head still learns of every ref inside."""
    handle = a_handle(0xabc, 777)
    value = [handle, ObjectRef(12345, _owned=False), 3]
    assert serialization._plain(value) == PLAIN | WITH_REFS
    assert serialization._plain((np.zeros(2), handle)) == PLAIN_NUMPY | WITH_REFS
    s = serialize(value)
    assert sorted(s.contained) == [777, 12345]
    back = pickle.loads(s.data)
    assert back[0] == handle and back[0]._lifetime.id == 777 and back[1].id == 12345
    assert back[0]._meta == {"inc": (1, 0)}
    with pytest.raises(TypeError, match="Counter.inc"):
        back[0].inc.remote()              # its argument checks came with it
    assert back[0].inc._call_name == "Counter.inc"


def test_handles_of_one_class_share_its_part_once_unpickled():
    first, second = (pickle.loads(serialize(a_handle(i, 100 + i)).data) for i in (1, 2))
    assert (first._actor_id, second._actor_id) == (1, 2)
    assert first._meta is second._meta and first._checks is second._checks
    assert (first._lifetime.id, second._lifetime.id) == (101, 102)


def test_a_users_reducer_for_object_refs_still_applies():
    copyreg.pickle(ObjectRef, lambda ref: (int, (ref.id,)))
    try:
        assert serialization._plain([ObjectRef(5, _owned=False)]) == NOT_PLAIN
        assert round_trip([ObjectRef(5, _owned=False)]) == [5]
    finally:
        copyreg.dispatch_table.pop(ObjectRef, None)


plain_atoms = st.one_of(
    st.integers(), st.floats(allow_nan=True), st.text(max_size=20), st.binary(max_size=20),
    st.booleans(), st.none(),
    hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)))
plain_values = st.recursive(
    plain_atoms,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(plain_values)
def test_random_plain_values_come_back_as_cloudpickle_brings_them(value):
    back = round_trip(value)
    assert same(pickle.loads(cloudpickled(value)), back)


def _rebuild_tagged(x):
    return ("custom", float(x))


def _reduce_tagged(x):
    return _rebuild_tagged, (float(x),)


def test_a_users_reducer_for_a_numpy_type_still_applies():
    """register_custom_serializer installs a copyreg reducer: a numpy type that has
    one is not plain, and cloudpickle (which reads copyreg) uses it."""
    copyreg.pickle(np.float32, _reduce_tagged)
    try:
        assert serialization._plain([np.float32(1.5)]) == NOT_PLAIN
        assert round_trip([np.float32(1.5)]) == [("custom", 1.5)]
    finally:
        copyreg.dispatch_table.pop(np.float32, None)
    assert serialization._plain([np.float32(1.5)]) == PLAIN_NUMPY
