"""The event feed: status transitions across clusters, as lines or JSON lines, followed live.

Two sources, one output.  In full mode the transitions topic is the feed
(kafka-python, ``read_committed`` because the processors publish in Kafka
transactions: an aborted batch never shows up; no consumer group, so a feed
is a pure viewer that commits nothing and disturbs no one).  In embedded mode
the warehouse's ``transitions`` table is (the named query
``transitions_feed``), followed by polling: the table is append-only, so its
rowid is a cursor that also catches a late cluster's older transitions.  The
file is reopened at every poll, so following a snapshot that the writer
replaces (``run warehouse --snapshot FILE``) sees each new copy.

Both sources yield transitions in the topic's format (``{cluster, namespace,
name, kind, uid, framework, definition, from, to, at, gpus,
previousDurationSeconds}``), so ``-o jsonl`` is the same whichever you read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

from workloadmap.catalog.records import parse_time
from workloadmap.warehouse.querying import WarehouseUnavailable, open_readonly, run_query
from workloadmap.warehouse.values import iso

from .settings import check_broker


@dataclass(frozen=True)
class Filters:
    """None (or empty) means any; a transition matches when every given filter does."""

    clusters: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()  # the status transitioned TO

    def match(self, t: dict) -> bool:
        return ((not self.clusters or t.get("cluster") in self.clusters)
                and (not self.namespaces or t.get("namespace") in self.namespaces)
                and (not self.kinds or t.get("kind") in self.kinds)
                and (not self.statuses or t.get("to") in self.statuses))

    def params(self) -> dict:
        return {"clusters": list(self.clusters) or None, "namespaces": list(self.namespaces) or None,
                "kinds": list(self.kinds) or None, "statuses": list(self.statuses) or None}


# --------------------------------------------------------------------------- formatting


def duration_text(seconds: float) -> str:
    """3h12m, 2d4h, 12m5s, 42s: the two largest units, rounded down."""
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{s}s"
    return f"{s}s"


def transition_line(t: dict) -> str:
    """``2026-11-03T10:00:00Z prod-us-east ml/llama JobSet Running -> Completed 64 GPU after 3h12m``"""
    try:
        at = parse_time(t["at"]).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (TypeError, ValueError, KeyError):
        at = str(t.get("at"))
    gpus = t.get("gpus")
    line = (f"{at} {t.get('cluster')} {t.get('namespace') or '-'}/{t.get('name') or '-'} {t.get('kind')} "
            f"{t.get('from') or '(new)'} -> {t.get('to')} {0 if gpus is None else gpus:g} GPU")
    if t.get("previousDurationSeconds") is not None:
        line += f" after {duration_text(t['previousDurationSeconds'])}"
    return line


def transition_json(t: dict) -> str:
    return json.dumps(t, ensure_ascii=False, separators=(",", ":"))


# --------------------------------------------------------------------------- warehouse


def _from_row(row: dict) -> dict:
    return {
        "cluster": row["cluster"], "namespace": row["namespace"], "name": row["name"], "kind": row["kind"],
        "uid": row["uid"], "framework": row["framework"], "definition": row["definition"],
        "from": row["from_status"], "to": row["to_status"], "at": iso(row["transitioned_at"], "milliseconds"),
        "gpus": row["gpus"], "previousDurationSeconds": row["previous_duration_seconds"],
    }


def reading_warehouse(path, filters: Filters = Filters(), *, since: datetime | None = None, follow: bool = False,
                      poll_interval: float = 1.0, idle_timeout: float | None = None,
                      should_stop: Callable[[], bool] = lambda: False) -> Iterator[dict]:
    """Transitions from a warehouse file: all of them (in time order), then, with `follow`, new ones.

    A missing or busy file raises WarehouseUnavailable on the first read; while
    following, a momentarily unreadable file (a snapshot being replaced) is retried.
    `idle_timeout` ends the follow after that many seconds without a new transition.
    """
    after_row = None
    first = True
    last_new = time.monotonic()
    while not should_stop():
        try:
            conn = open_readonly(path)
        except WarehouseUnavailable:
            if first:
                raise
            rows = []
        else:
            try:
                rows = run_query(conn, "transitions_feed", after_row=after_row, since=since,
                                 **filters.params()).dicts()
                # the cursor moves past every row, matching or not
                top = run_query(conn, "transitions_last_row").rows[0][0]
            finally:
                conn.close()
            if top is not None:
                after_row = top if after_row is None else max(after_row, top)
        first = False
        for row in rows:
            yield _from_row(row)
        if rows:
            last_new = time.monotonic()
        if not follow:
            return
        if idle_timeout is not None and time.monotonic() - last_new >= idle_timeout:
            return
        time.sleep(poll_interval)


# --------------------------------------------------------------------------- Kafka


def reading_topic(settings, filters: Filters = Filters(), *, from_beginning: bool = False,
                  idle_timeout: float | None = None, poll_ms: int = 500,
                  should_stop: Callable[[], bool] = lambda: False) -> Iterator[dict]:
    """Transitions from the transitions topic, followed until stopped (or idle for `idle_timeout` s).

    No consumer group: every partition is read, from the beginning or from the
    end, and nothing is committed.  Messages that are not transitions are skipped.
    BrokerUnavailable at once when no broker answers.
    """
    from kafka import KafkaConsumer

    check_broker(settings)

    consumer = KafkaConsumer(
        settings.transitions_topic, bootstrap_servers=settings.bootstrap_servers, group_id=None,
        client_id=settings.client_id + "-feed", enable_auto_commit=False,
        auto_offset_reset="earliest" if from_beginning else "latest",
        isolation_level="read_committed", **settings.security())
    try:
        last_new = time.monotonic()
        while not should_stop():
            polled = consumer.poll(timeout_ms=poll_ms)
            got = False
            for messages in polled.values():
                for m in sorted(messages, key=lambda m: m.offset):
                    try:
                        t = json.loads(m.value)
                    except (TypeError, ValueError, UnicodeDecodeError):
                        continue
                    if not isinstance(t, dict) or "to" not in t:
                        continue
                    got = True
                    if filters.match(t):
                        yield t
            if got:
                last_new = time.monotonic()
            elif idle_timeout is not None and time.monotonic() - last_new >= idle_timeout:
                return
    finally:
        consumer.close(autocommit=False)
