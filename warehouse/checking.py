"""Checking workload records and transitions before the writer stores them.

Why a module of its own: what the warehouse accepts is a contract with the
processors (the record format of ``catalog.records``), and every path into
the file goes through it: ``Warehouse.write`` (the embedded demo, the tests),
the Kafka writer (``consuming.py``) and the pod and node records
(``allocating.py``).  A value the warehouse cannot store raises
``MalformedRecord`` with a dead-letter reason and a detail naming the field,
before anything touches the file.

- ``check_record`` / ``check_transition``: one value, its row of columns or
  the reason it is refused;
- ``check_records``: a batch; ``fast_rows``, the batch's usual case (all
  valid) inlined, never accepts what ``check_record`` refuses (a Hypothesis
  test holds the two equal).

Instants in the rows are integer microseconds since the epoch (UTC), the
form Arrow builds a timestamp column from cheapest.
"""

from __future__ import annotations

import contextlib
import gc
import operator
from datetime import datetime, timedelta, timezone

from workloadmap.catalog import records
from workloadmap.catalog.records import DELETED, EVENT_TYPES


class MalformedRecord(ValueError):
    """A record or transition the warehouse cannot store (a dead-letter reason and a detail)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail



EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MICROSECOND = timedelta(microseconds=1)


def version_key(rv: str | None, observed: str, references) -> str:
    """What tells two facts of one workload apart: its resourceVersion (or its observation time
    without one) and, for a definition with references, which of the objects it names it was
    resolved with: resolved again once a missing one arrives, the same version is a new fact."""
    key = rv if rv is not None else "@" + observed
    if isinstance(references, list) and references:
        key += "#" + "".join("1" if isinstance(r, dict) and r.get("found") is True else "0" for r in references)
    return key


def micros(t: datetime) -> int:
    """An instant (naive: UTC) as integer microseconds since the epoch."""
    return ((t if t.tzinfo else t.replace(tzinfo=timezone.utc)) - EPOCH) // MICROSECOND


def timestamp_micros(value, field: str) -> int:
    """A timestamp field as integer microseconds since the epoch, or MalformedRecord."""
    if not isinstance(value, str):
        raise MalformedRecord(records.WRONG_TYPES, f"{field} is {type(value).__name__}, not a timestamp string")
    try:
        t = records.parse_time(value)
    except ValueError:
        raise MalformedRecord(records.WRONG_TYPES, f"{field} {value[:40]!r} is not an RFC 3339 timestamp") from None
    return micros(t)


def _require(d: dict, fields: tuple[str, ...], what: str) -> None:
    missing = [f for f in fields if f not in d]
    if missing:
        raise MalformedRecord(records.MISSING_FIELDS, f"{what} lacks {', '.join(missing)}")


def _text(d: dict, field: str, *, nullable: bool = True) -> str | None:
    v = d.get(field)
    if v is None and nullable:
        return None
    if not isinstance(v, str) or (not nullable and not v):
        raise MalformedRecord(records.WRONG_TYPES, f"{field} must be a{'' if nullable else ' non-empty'} string")
    return v


def _number(d: dict, field: str, what: str) -> float:
    v = d.get(field)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise MalformedRecord(records.WRONG_TYPES, f"{what}.{field} must be a non-negative number")
    return v


_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1   # the pods and memory columns' ranges
_RECORD_FIELDS = ("cluster", "uid", "kind", "status", "observedAt", "eventType", "deleted", "total")
_TRANSITION_FIELDS = ("cluster", "uid", "to", "at")


def check_record(record) -> tuple:
    """Validate one workload record; return its row of scalar columns or raise MalformedRecord."""
    if not isinstance(record, dict):
        raise MalformedRecord(records.WRONG_TYPES, f"a record is a JSON object, not {type(record).__name__}")
    _require(record, _RECORD_FIELDS, "workload record")
    cluster = _text(record, "cluster", nullable=False)
    uid = _text(record, "uid", nullable=False)
    kind = _text(record, "kind", nullable=False)
    status = _text(record, "status", nullable=False)
    event_type = record["eventType"]
    if event_type not in EVENT_TYPES:
        raise MalformedRecord(records.WRONG_TYPES, f"eventType {str(event_type)[:20]!r} is not one of {EVENT_TYPES}")
    deleted = record["deleted"]
    if not isinstance(deleted, bool):
        raise MalformedRecord(records.WRONG_TYPES, "deleted must be a boolean")
    observed = timestamp_micros(record["observedAt"], "observedAt")
    created = record.get("creationTimestamp")
    created = timestamp_micros(created, "creationTimestamp") if created is not None else None
    total = record["total"]
    if not isinstance(total, dict):
        raise MalformedRecord(records.WRONG_TYPES, "total must be an object")
    _require(total, ("gpu", "cpu", "memory"), "total")
    gpus, cpu, memory = (_number(total, f, "total") for f in ("gpu", "cpu", "memory"))
    pods = total.get("pods", 0)
    if isinstance(pods, bool) or not isinstance(pods, int) or not 0 <= pods <= _INT32_MAX:
        raise MalformedRecord(records.WRONG_TYPES, "total.pods must be an integer from 0 to 2^31-1")
    if memory > _INT64_MAX:
        raise MalformedRecord(records.WRONG_TYPES, "total.memory must be at most 2^63-1 bytes")
    gpu_resources = total.get("gpuResources") or {}
    if not isinstance(gpu_resources, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in gpu_resources.values()):
        raise MalformedRecord(records.WRONG_TYPES, "total.gpuResources must map names to numbers")
    rv = record.get("resourceVersion")
    rv = None if rv is None else str(rv)
    generation = record.get("generation")
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)):
        raise MalformedRecord(records.WRONG_TYPES, "generation must be an integer")
    if deleted:  # a deleted workload holds nothing from then on
        status, pods, gpus, cpu, memory, gpu_resources = DELETED, 0, 0.0, 0.0, 0, {}
    return (
        cluster, uid, _text(record, "apiVersion"), kind, _text(record, "namespace"), _text(record, "name"),
        _text(record, "definition"), _text(record, "framework"),
        rv, version_key(rv, record["observedAt"], record.get("references")), generation, _text(record, "origin"),
        created,
        observed, event_type, deleted, status, _text(record, "phase"),
        pods, float(gpus), float(cpu), int(memory), sorted((str(k), float(v)) for k, v in gpu_resources.items()),
    )


@contextlib.contextmanager
def no_cyclic_collection():
    """Python's cyclic collector off for a batch: a batch allocates some ten objects per record,
    which the collector would walk again and again, and none of them makes a cycle, so reference
    counting frees them all."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


class _Slow(Exception):
    """The batch's fast check met something it does not decide: check_record decides, record by record."""


_REQUIRED = operator.itemgetter("cluster", "uid", "kind", "status", "eventType", "deleted", "observedAt", "total")
_TOTAL_REQUIRED = operator.itemgetter("gpu", "cpu", "memory")
_NUMBER = (int, float)


def fast_rows(values) -> list[tuple]:
    """check_record over a batch, inlined: the same rows for records it accepts; raises _Slow (or
    any other exception) at the first value it does not accept outright, never accepting what
    check_record refuses (its type tests are exact types, stricter than check_record's isinstance).
    It serves the batch's usual case, all valid, at a fraction of check_record's cost per record."""
    out = []
    parse = datetime.fromisoformat
    times: dict[str, int] = {}  # a batch repeats instants (creation timestamps, observedAt)
    for r in values:
        if type(r) is not dict:
            raise _Slow
        g = r.get
        cluster, uid, kind, status, event_type, deleted, observed_text, total = _REQUIRED(r)  # KeyError: slow
        if not (type(cluster) is str and type(uid) is str and type(kind) is str and type(status) is str
                and cluster and uid and kind and status):
            raise _Slow
        if type(event_type) is not str or event_type not in EVENT_TYPES or type(deleted) is not bool:
            raise _Slow
        observed = times.get(observed_text)
        if observed is None:
            if type(observed_text) is not str:
                raise _Slow
            observed = micros(parse(observed_text.replace("Z", "+00:00")))
            times[observed_text] = observed
        created = g("creationTimestamp")
        if created is not None:
            text, created = created, times.get(created)
            if created is None:
                if type(text) is not str:
                    raise _Slow
                created = micros(parse(text.replace("Z", "+00:00")))
                times[text] = created
        if type(total) is not dict:
            raise _Slow
        gpus, cpu, memory = _TOTAL_REQUIRED(total)
        pods = total.get("pods", 0)
        if not (type(gpus) in _NUMBER and type(cpu) in _NUMBER and type(memory) in _NUMBER and type(pods) is int
                and gpus >= 0 and cpu >= 0 and 0 <= memory <= _INT64_MAX and 0 <= pods <= _INT32_MAX):
            raise _Slow
        gres = total.get("gpuResources") or None
        if gres is not None:
            if type(gres) is not dict:
                raise _Slow
            gres = sorted(gres.items())
            for k, v in gres:
                if type(k) is not str or type(v) not in _NUMBER:
                    raise _Slow
        rv, generation = g("resourceVersion"), g("generation")
        if not ((rv is None or type(rv) is str) and (generation is None or type(generation) is int)):
            raise _Slow
        api_version, namespace, name, definition = g("apiVersion"), g("namespace"), g("name"), g("definition")
        framework, origin, phase = g("framework"), g("origin"), g("phase")
        if not ((api_version is None or type(api_version) is str) and (namespace is None or type(namespace) is str)
                and (name is None or type(name) is str) and (definition is None or type(definition) is str)
                and (framework is None or type(framework) is str) and (origin is None or type(origin) is str)
                and (phase is None or type(phase) is str)):
            raise _Slow
        if deleted:
            status, pods, gpus, cpu, memory, gres = DELETED, 0, 0.0, 0.0, 0, None
        out.append((
            cluster, uid, api_version, kind, namespace, name, definition, framework,
            rv, version_key(rv, observed_text, g("references")), generation, origin, created,
            observed, event_type, deleted, status, phase,
            pods, float(gpus), float(cpu), int(memory), [(k, float(v)) for k, v in gres] if gres else [],
        ))
    return out


def check_records(values: list) -> list:
    """check_record over a batch: per value its row, or the ValueError that refuses it (a
    MalformedRecord with its reason, or what else check_record raised, e.g. a NaN of memory).

    The batch's usual case (all valid) takes the fast inlined check; any batch it does not accept
    outright goes record by record through check_record, which decides and gives the reasons."""
    try:
        return fast_rows(values)
    except Exception:
        pass
    out = []
    for v in values:
        try:
            out.append(check_record(v))
        except ValueError as exc:
            out.append(exc)
    return out


def check_transition(transition) -> tuple:
    """Validate one transition; return its row or raise MalformedRecord."""
    if not isinstance(transition, dict):
        raise MalformedRecord(records.WRONG_TYPES, f"a transition is a JSON object, not {type(transition).__name__}")
    _require(transition, _TRANSITION_FIELDS, "transition")
    gpus = transition.get("gpus")
    duration = transition.get("previousDurationSeconds")
    for field, v in (("gpus", gpus), ("previousDurationSeconds", duration)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise MalformedRecord(records.WRONG_TYPES, f"{field} must be a number")
    return (
        _text(transition, "cluster", nullable=False), _text(transition, "uid", nullable=False),
        _text(transition, "namespace"), _text(transition, "name"), _text(transition, "kind"),
        _text(transition, "framework"), _text(transition, "definition"),
        _text(transition, "from"), _text(transition, "to", nullable=False), timestamp_micros(transition["at"], "at"),
        None if gpus is None else float(gpus), None if duration is None else float(duration),
    )
