"""warehouse/checking.py: the batch check gives check_record's rows and reasons, and never accepts
what check_record refuses (Hypothesis), on values and on the Kafka writer's messages."""

from __future__ import annotations

import collections
import copy
import json

from hypothesis import given, settings, strategies as st

from workloadmap.catalog import records
from workloadmap.warehouse import checking, consuming
from workloadmap.warehouse.checking import MalformedRecord


from tests.warehouse.workload_records import EXAMPLES, as_record, lifecycle


def test_the_batch_check_gives_check_records_rows_and_its_reasons():
    """check_records' fast path gives exactly check_record's rows; a batch it does not accept outright
    is checked record by record, each malformed one with check_record's reason."""
    good = [as_record(r, cluster=f"c{i % 3}", observed=f"2025-06-03T09:{i % 60:02d}:00.5+02:00",
                      event="DELETED" if i % 7 == 0 else "MODIFIED", uid=f"u{i}", creationTimestamp="2025-06-01")
            for i, r in enumerate(EXAMPLES * 2)]
    assert checking.fast_rows(good) == [checking.check_record(r) for r in good] == checking.check_records(good)
    odd = [dict(good[0], resourceVersion=7), dict(good[1], total=dict(good[1]["total"], gpuResources={"b": 1, "a": 2.5}))]
    assert checking.check_records(odd) == [checking.check_record(r) for r in odd]  # accepted, as before
    bad = [dict(good[0], observedAt="yesterday"), {k: v for k, v in good[1].items() if k != "uid"},
           dict(good[2], deleted="no"), dict(good[3], total={"gpu": -1, "cpu": 0, "memory": 0}), "not a dict",
           dict(good[4], total={"gpu": 0, "cpu": 0, "memory": 0, "pods": True}), dict(good[5], eventType=["x"])]
    checked = checking.check_records(good[:3] + bad + good[3:6])
    assert checked[:3] == [checking.check_record(r) for r in good[:3]]
    assert checked[-3:] == [checking.check_record(r) for r in good[3:6]]
    assert [(e.reason, type(e)) for e in checked[3:-3]] == [
        (records.WRONG_TYPES, MalformedRecord), (records.MISSING_FIELDS, MalformedRecord)] + [
        (records.WRONG_TYPES, MalformedRecord)] * 5


Message = collections.namedtuple("Message", "topic partition offset key value")
_SCALAR = (st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.integers(-3, 3)
           | st.floats(allow_nan=False) | st.text(max_size=8)
           | st.sampled_from(["2025-06-03T09:00:00Z", "2025-06-03", "ADDED", "DELETED", "Running", ""]))
_JSONISH = _SCALAR | st.lists(_SCALAR, max_size=2) | st.dictionaries(st.text(max_size=4), _SCALAR, max_size=2)
_FIELDS = [*checking._RECORD_FIELDS, "apiVersion", "namespace", "name", "definition", "framework", "origin",
           "phase", "resourceVersion", "generation", "creationTimestamp"]
_TOTAL_FIELDS = ["gpu", "cpu", "memory", "pods", "gpuResources"]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_batch_check_never_accepts_what_check_record_refuses(data):
    """Any record (a valid one with fields replaced, removed, or its total's): the fast batch check
    either gives check_record's row or declines the batch (which check_record then decides)."""
    rec = copy.deepcopy(data.draw(st.sampled_from(lifecycle())))
    for field in data.draw(st.lists(st.sampled_from(_FIELDS), max_size=3)):
        if data.draw(st.booleans()):
            rec.pop(field, None)
        else:
            rec[field] = data.draw(_JSONISH)
    if isinstance(rec.get("total"), dict):
        for field in data.draw(st.lists(st.sampled_from(_TOTAL_FIELDS), max_size=2)):
            rec["total"][field] = data.draw(_JSONISH | st.dictionaries(st.text(max_size=4), st.floats(-1, 8)))
    try:
        expected = checking.check_record(rec)
    except (ValueError, TypeError, OverflowError) as exc:
        expected = exc
    try:
        fast = checking.fast_rows([rec])
    except Exception:
        fast = None  # declined: check_record decides
    assert fast in (None, [expected]), f"the fast check accepted {rec!r}; check_record gave {expected!r}"
    # The Kafka writer's path from the message's bytes (only the read fields decoded) agrees with
    # check_record on the message's whole value (as JSON gives it: orjson reads a 65-bit integer
    # as a float, for one).
    message = Message(records.WORKLOADS_TOPIC, 0, 7, None, json.dumps(rec).encode())
    try:
        expected = checking.check_record(consuming._whole(message.value)[0])
    except (ValueError, TypeError, OverflowError) as exc:
        expected = exc
    rows, texts, _, dead, offsets, _ = consuming.check_messages([message])
    assert offsets == {(records.WORKLOADS_TOPIC, 0): 8}
    if isinstance(expected, MalformedRecord):
        assert rows == [] and [(d.reason, d.detail) for d in dead] == [(expected.reason, expected.detail)]
    elif isinstance(expected, Exception):
        assert rows == [] and len(dead) == 1
    else:
        assert rows == [expected] and dead == [] and texts == [message.value.decode()]
