"""The soak's end-state check of pods (bench/soak.py ``kept_pod``) against the records the processors
really make: every pod's last record must say what the processors keep of its last raw event.

Issue 30: a 3-minute soak flagged a simulated bare pod (prod-eu-west/cuda-vectoradd-qphdl) whose last
record was Pending (rv 1100263) while its last raw event was Running (rv 1100778).  Its events in the
simulated history (workload_states of the kept run): Pending, Pending, Running, Running, ... with no
node at all; ``pod_state`` makes every one of them state Pending, so by the pods topic's contract
(README: a record when the state, node, request or attribution changes) only the first made a pod
record.  The soak compared the phase; the processors lost nothing."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from workloadmap.catalog import records
from workloadmap.processors.processing import MemoryStates, Processor

SOAK = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


def load_soak():
    spec = importlib.util.spec_from_file_location("soak_under_test", SOAK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bare_pod(rv: str, phase: str, node: str | None = None) -> dict:
    """A pod without owners (a workload of its own, as the simulated history's cuda-vectoradd pods)."""
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "cuda-vectoradd-qphdl", "namespace": "default", "uid": "p-1",
                        "resourceVersion": rv, "creationTimestamp": "2026-11-01T02:21:16Z"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": phase}}
    if node:
        obj["spec"]["nodeName"] = node
    return obj


def pod_records(*events) -> list[dict]:
    processor, states = Processor(), MemoryStates()
    out = []
    for etype, obj, at in events:
        value = records.encode(records.raw_event("prod-eu-west", etype, obj, at))
        out += [json.loads(v) for _, v in processor.process(b"prod-eu-west/default", value, states).pods]
    return out


def test_a_bare_pod_running_without_a_node_ends_as_its_pending_record_keeps_it():
    soak = load_soak()
    last = bare_pod("1100778", "Running")
    made = pod_records(("ADDED", bare_pod("1100263", "Pending"), "2026-11-01T02:21:16.404Z"),
                       ("MODIFIED", bare_pod("1100287", "Pending"), "2026-11-01T02:24:14.842Z"),
                       ("MODIFIED", bare_pod("1100294", "Running"), "2026-11-01T02:25:53.429Z"),
                       ("MODIFIED", last, "2026-11-01T09:52:32.148Z"))
    # one record: no node throughout, so state Pending throughout (catalog.attributing.pod_state)
    assert [(r["resourceVersion"], r["phase"], r["state"]) for r in made] == [("1100263", "Pending", "Pending")]
    record = made[-1]
    assert soak.kept_pod(record["nodeName"], record["state"], record["deleted"]) == ("pod", None, "Pending")
    assert soak.kept_pod_event(last, False) == ("pod", None, "Pending")


def test_a_bound_pod_s_phase_change_is_churn_and_a_lost_bind_is_still_seen():
    soak = load_soak()
    pending, bound, running = bare_pod("10", "Pending"), bare_pod("11", "Pending", "n1"), bare_pod("12", "Running", "n1")
    made = pod_records(("ADDED", pending, "2026-11-01T00:00:00Z"), ("MODIFIED", bound, "2026-11-01T00:00:05Z"),
                       ("MODIFIED", running, "2026-11-01T00:00:07Z"))
    assert [(r["resourceVersion"], r["state"]) for r in made] == [("10", "Pending"), ("11", "Bound")]
    kept = [soak.kept_pod(r["nodeName"], r["state"], r["deleted"]) for r in made]
    assert kept[-1] == soak.kept_pod_event(running, False) == ("pod", "n1", "Bound")
    # had the bind's record been lost, the first record would not say what the last event says
    assert kept[0] != soak.kept_pod_event(running, False)
    # a deletion is a deletion whatever it carries (a relist's deletion has the identity only)
    assert soak.kept_pod_event({"metadata": {"uid": "p-1"}}, True) == ("pod", True)
