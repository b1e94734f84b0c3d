"""The wire protocol: one schema per message kind, and every kind through its handler.

Every multi-rank test also runs with ``HPC_RAY_CHECK_MESSAGES=1`` (set by
``conftest.launch_env``), so any message a real rank receives that does not
match its kind's schema fails that test.
"""
from __future__ import annotations

import pickle

from hpc_ray.transport import messages as m


def test_every_kind_has_a_schema_with_kind_first():
    for kind in m.Msg:
        assert kind.value in m.SCHEMA, f"Msg.{kind.name} has no NamedTuple in SCHEMA"
    assert set(m.SCHEMA) == {k.value for k in m.Msg}
    for kind, schema in m.SCHEMA.items():
        assert schema._fields[0] == "kind", schema
        assert schema.__doc__ and "->" in schema.__doc__, f"{schema.__name__}: who sends it?"


def test_every_field_has_a_type_the_check_tests():
    untyped = set()
    for schema in m.SCHEMA.values():
        types = m.field_types(schema)
        assert [name for name, _ in types] == list(schema._fields[1:]), schema
        for name, accepted in types:
            if accepted is None:
                untyped.add(f"{schema.__name__}.{name}")
            else:
                assert all(isinstance(t, type) for t in accepted), (schema, name, accepted)
    assert untyped == {"Reply.payload"}     # (the answer to any request)


def test_a_field_of_the_wrong_type_is_refused_naming_kind_and_field():
    import pytest
    good = (m.TASK_DONE, 7, [(0, 1)], None, 1.0, 2.0, 3)
    m.check(good, "test")
    m.check(good[:4] + (1, 2) + good[6:], "test")       # an int where a float goes
    with pytest.raises(m.MessageError, match=r"TaskDone\.task_id must be int, got str"):
        m.check((m.TASK_DONE, "7") + good[2:], "test")
    with pytest.raises(m.MessageError, match=r"TaskDone\.results must be list"):
        m.check((m.TASK_DONE, 7, ((0, 1),)) + good[3:], "test")
    with pytest.raises(m.MessageError, match=r"TaskDone\.contained must be list \| tuple \| None"):
        m.check((m.TASK_DONE, 7, [(0, 1)], 5) + good[4:], "test")
    with pytest.raises(m.MessageError, match=r"KillActor\.no_restart must be bool"):
        m.check((m.KILL_ACTOR, 3, None, False), "test")
    ended = (m.PROCESS_ENDED, 5, [], [], [], 0, [], None, None)   # optional fields: None
    m.check(ended, "test")
    m.check(ended[:7] + (-9, 4), "test")
    with pytest.raises(m.MessageError, match=r"ProcessEnded\.exitcode must be int \| None"):
        m.check(ended[:7] + ("killed", None), "test")


def test_named_and_plain_tuples_are_the_same_on_the_wire():
    named = m.TaskDone(m.TASK_DONE, 7, [(0, 1)], None, 1.0, 2.0, 3)
    plain = (m.TASK_DONE, 7, [(0, 1)], None, 1.0, 2.0, 3)
    assert pickle.loads(pickle.dumps(tuple(named))) == plain
    m.check(plain, "test")


def test_a_message_with_the_wrong_fields_is_refused():
    import pytest
    with pytest.raises(m.MessageError, match="ActorDied"):
        m.check((m.ACTOR_DIED, 1, "reason"), "test")     # allow_restart missing
    with pytest.raises(m.MessageError, match="unknown"):
        m.check((999,), "test")


def test_every_kind_the_head_handles_goes_through_its_handler(run):
    result = run("message_kinds.py", 1, mode="plain", timeout=60)
    assert "OK message_kinds" in result.stdout, result.output
    assert "OK contexts" in result.stdout, result.output
    assert "OK forwarded" in result.stdout, result.output


def test_collective_group_creation_tags_never_equal_a_channel_tag():
    from hpc_ray.transport.tags import Tag, group_creation_tag
    channel = {t.value for t in Tag}
    tags = {group_creation_tag(f"group-{i}") for i in range(20_000)}
    assert not tags & channel
    assert max(tags) < 32767          # MPI's guaranteed upper bound


def test_reports_alone_leave_a_loop_in_its_back_off():
    # Callers of an actor report their direct calls every few hundred calls;
    # a loop that counted those as activity polled every 20 us all along.
    report = (m.DIRECT_DONE, b"")
    assert not m.reply_due([report])
    assert not m.reply_due([report, (m.PROFILE, [])])
    assert m.reply_due([report, (m.GET, 1, [2], None)])
    assert set(m.NO_REPLY_DUE) <= m.TO_HEAD
