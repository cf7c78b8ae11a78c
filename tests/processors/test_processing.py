"""Processing raw events: records, transitions, dead letters, dedup, deletion, cluster definitions."""

from __future__ import annotations

import base64
import copy
import json

from datetime import timedelta

import pytest
import yaml

from workloadmap.catalog import records
from workloadmap.processors import processing
from workloadmap.processors.processing import KIND_WAIT, MemoryStates, Processor, transition_of

from tests.conftest import example_objects

T0 = "2026-11-01T00:00:00.000Z"


def event(obj, etype="MODIFIED", cluster="prod", at=T0):
    return records.encode(records.raw_event(cluster, etype, obj, at))


def decoded(pairs):
    return [json.loads(v) for _, v in pairs]


def transitions(out):
    return [t for t in (transition_of(r) for r in decoded(out.records)) if t is not None]


@pytest.fixture
def processor():
    return Processor()


def _jobset(rv="100"):
    obj = copy.deepcopy(example_objects("jobset")["llama-pretrain"])
    obj["metadata"]["resourceVersion"] = rv
    return obj


def test_a_record_and_a_first_transition(processor):
    state = MemoryStates()
    out = processor.process(b"k", event(_jobset(), "ADDED"), state)
    (record,) = decoded(out.records)
    assert record["cluster"] == "prod" and record["eventType"] == "ADDED" and record["deleted"] is False
    assert record["status"] == "Running" and record["total"]["gpu"] == 64
    (transition,) = transitions(out)
    assert transition["from"] is None and transition["to"] == "Running" and transition["gpus"] == 64
    assert decoded(out.transitions) == [transition]  # published alongside, derived from the record
    assert transition["previousDurationSeconds"] is None
    assert out.records[0][0] == records.record_key("prod", record["uid"])
    assert not out.dead_letters


def test_duplicates_and_stale_events_produce_nothing(processor):
    state = MemoryStates()
    processor.process(None, event(_jobset("100")), state)
    again = processor.process(None, event(_jobset("100")), state)
    older = processor.process(None, event(_jobset("99")), state)
    assert not again.records
    assert not older.records


def test_status_change_makes_a_transition_with_the_previous_duration(processor):
    state = MemoryStates()
    processor.process(None, event(_jobset("100"), at="2026-11-01T00:00:00Z"), state)
    same = processor.process(None, event(_jobset("101"), at="2026-11-01T00:30:00Z"), state)
    assert len(same.records) == 1 and not transitions(same)  # new version, same status
    failed = _jobset("102")
    failed["status"]["conditions"].append({"type": "Failed", "status": "True", "reason": "FailedJobs",
                                           "message": "job failed", "lastTransitionTime": "2026-11-01T01:00:00Z"})
    out = processor.process(None, event(failed, at="2026-11-01T01:00:00Z"), state)
    (t,) = transitions(out)
    assert (t["from"], t["to"], t["previousDurationSeconds"]) == ("Running", "Failed", 3600.0)


def test_deletion_ends_the_workload(processor):
    state = MemoryStates()
    processor.process(None, event(_jobset("100")), state)
    out = processor.process(None, event(_jobset("150"), "DELETED", at="2026-11-01T02:00:00Z"), state)
    (record,) = decoded(out.records)
    assert record["deleted"] is True and record["status"] == "Deleted" and record["eventType"] == "DELETED"
    (t,) = transitions(out)
    assert (t["from"], t["to"], t["gpus"]) == ("Running", "Deleted", 0)
    late = processor.process(None, event(_jobset("200")), state)
    assert not late.records


@pytest.mark.parametrize("value, reason", [
    (b"{not json", records.MALFORMED_JSON),
    (b"\xff\xfe", records.MALFORMED_JSON),
    (b"[1, 2]", records.WRONG_TYPES),
    (json.dumps({"cluster": "c", "type": "ADDED"}).encode(), records.MISSING_FIELDS),
    (json.dumps({"cluster": "c", "type": "ADDED", "observedAt": T0, "object": "text"}).encode(), records.WRONG_TYPES),
    (json.dumps({"cluster": "c", "type": "UPDATED", "observedAt": T0, "object": {}}).encode(), records.WRONG_TYPES),
    (json.dumps({"cluster": "c", "type": "ADDED", "observedAt": T0,
                 "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}}).encode(),
     records.MISSING_FIELDS),
    (json.dumps({"cluster": "c", "type": "ADDED", "observedAt": "yesterday",
                 "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"uid": "u"}}}).encode(),
     records.WRONG_TYPES),
    (json.dumps({"cluster": "c", "type": "ADDED", "observedAt": T0,
                 "object": {"apiVersion": "example.com/v1", "kind": "Mystery", "metadata": {"uid": "u"}}}).encode(),
     records.UNKNOWN_KIND),
    (json.dumps({"cluster": "c", "type": "ADDED", "observedAt": T0,
                 "object": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"uid": "u", "name": "j"},
                            "spec": {"parallelism": "lots"}}}).encode(), records.RESOLVE_ERROR),
    (json.dumps({"cluster": "c", "type": "ADDED", "observedAt": T0,
                 "object": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"uid": "u", "name": "j"},
                            "spec": "text"}}).encode(), records.JQ_ERROR),
])
def test_bad_input_goes_to_the_dead_letter_topic_with_its_reason(processor, value, reason):
    out = processor.process(b"key", value, MemoryStates(), partition=2, offset=41)
    assert not out.records
    (letter,) = decoded(out.dead_letters)
    assert letter["reason"] == reason, letter["detail"]
    assert letter["stage"] == "processor" and letter["partition"] == 2 and letter["offset"] == 41
    import base64
    assert base64.b64decode(letter["valueBase64"]) == value


def test_cluster_definitions_override_builtins_for_that_cluster_only(processor):
    doc = yaml.safe_load(open("catalog/builtin/job.yaml"))
    doc["metadata"] = {"name": "custom-job", "uid": "def-uid", "resourceVersion": "1"}
    doc["spec"]["framework"] = "Custom Batch"
    out = processor.process(None, event(doc, "ADDED", cluster="lab"), MemoryStates())
    assert not out.records and not out.dead_letters
    job = next(iter(example_objects("job").values()))
    lab = decoded(processor.process(None, event(job, cluster="lab"), MemoryStates()).records)[0]
    prod = decoded(processor.process(None, event(job, cluster="prod"), MemoryStates()).records)[0]
    assert (lab["definition"], lab["origin"], lab["framework"]) == ("custom-job", "cluster", "Custom Batch")
    assert (prod["definition"], prod["origin"]) == ("job", "built-in")
    processor.process(None, event(doc, "DELETED", cluster="lab"), MemoryStates())
    again = decoded(processor.process(None, event(job, cluster="lab"), MemoryStates()).records)[0]
    assert again["definition"] == "job"


def test_an_invalid_cluster_definition_is_dead_lettered(processor):
    doc = {"apiVersion": "workloadmap.io/v1alpha1", "kind": "WorkloadMap",
           "metadata": {"name": "broken", "uid": "u"}, "spec": {"structureDefinition": {}}}
    (letter,) = decoded(processor.process(None, event(doc, "ADDED"), MemoryStates()).dead_letters)
    assert letter["reason"] == records.INVALID_DEFINITION and "rootComponent" in letter["detail"]


def _messages_of_a_history():
    """Raw messages of a simulated history over three partitions, with re-deliveries and bad input."""
    from workloadmap.ingest.simulating import simulate_messages
    messages = []
    for i, (key, value, _) in enumerate(simulate_messages(clusters=2, workloads=30, days=1, seed=3,
                                                          bad_fraction=0.05)):
        partition = hash(key) % 3 if key else 0
        messages.append((key, value, records.RAW_TOPIC, partition, i))
        if i % 7 == 0:   # a re-delivery of the same message, in the same batch or a later one
            messages.append((key, value, records.RAW_TOPIC, partition, i))
    return messages


def test_a_batch_gives_exactly_the_outputs_of_its_messages_one_by_one_per_partition_in_order():
    messages = _messages_of_a_history()
    one_by_one, states = {}, {}
    single = Processor()
    for key, value, topic, partition, offset in messages:
        out = single.process(key, value, states.setdefault(partition, MemoryStates()), topic=topic,
                             partition=partition, offset=offset)
        mine = one_by_one.setdefault(partition, {"records": [], "transitions": [], "dead_letters": [],
                                                 "definitions": []})
        for name in mine:
            mine[name].extend(getattr(out, name))
    batched, batch_states = {}, {}
    processor = Processor()
    for start in range(0, len(messages), 97):   # batches of any size, cut anywhere
        by_partition = processor.process_batch(messages[start:start + 97],
                                               lambda p: batch_states.setdefault(p, MemoryStates()))
        for partition, out in by_partition.items():
            mine = batched.setdefault(partition, {"records": [], "transitions": [], "dead_letters": [],
                                                  "definitions": []})
            for name in mine:
                mine[name].extend(getattr(out, name))
    for outputs in (batched, one_by_one):   # a dead letter says when it was written: not compared
        for mine in outputs.values():
            mine["dead_letters"] = [(k, {**json.loads(v), "at": None}) for k, v in mine["dead_letters"]]
    assert batched == one_by_one
    assert sum(len(p["records"]) for p in batched.values()) > 100
    assert any(p["dead_letters"] for p in batched.values())
    assert batch_states == states


def test_within_a_batch_an_event_sees_the_state_the_events_before_it_left(processor):
    created, updated = _jobset("100"), _jobset("101")
    batch = [(None, event(created, "ADDED"), records.RAW_TOPIC, 0, 0),
             (None, event(created, "ADDED"), records.RAW_TOPIC, 0, 1),   # a duplicate: nothing
             (None, event(updated, at="2026-11-01T00:10:00Z"), records.RAW_TOPIC, 0, 2),
             (None, event(_jobset("99")), records.RAW_TOPIC, 0, 3)]      # older: nothing
    states = MemoryStates()
    (out,) = processor.process_batch(batch, lambda p: states).values()
    first, second = decoded(out.records)
    assert (first["resourceVersion"], second["resourceVersion"]) == ("100", "101")
    assert second["previousStatus"] == "Running" and second["statusSince"] == first["statusSince"]
    assert len(out.transitions) == 1   # the first record's (from nothing to Running)


# -- referenced objects (a TrainJob's runtime) ------------------------------------------------------

def _runtime(name="torch-distributed", rv="10"):
    from workloadmap.catalog.registry import bundled_related

    obj = copy.deepcopy(next(o for o in bundled_related() if o["metadata"]["name"] == name))
    obj["metadata"]["resourceVersion"] = rv
    return obj


def test_a_workload_is_resolved_with_the_object_its_reference_names(processor):
    """The runtime's raw event is no workload: it is kept (per cluster) and shared on the definitions
    topic; the TrainJob that names it then has the runtime's pods."""
    state = MemoryStates()
    out = processor.process(None, event(_runtime(), "ADDED"), state)
    assert out.records == [] and out.dead_letters == []
    ((key, value),) = out.definitions
    assert key == b"prod/related:ClusterTrainingRuntime//torch-distributed"
    assert json.loads(value)["object"]["metadata"]["name"] == "torch-distributed"
    job = example_objects("trainjob")["llama-finetune"]
    (record,) = decoded(processor.process(None, event(job, "ADDED"), state).records)
    assert (record["total"]["pods"], record["total"]["gpu"], record["references"][0]["found"]) == (4, 32, True)
    # another cluster has no such runtime: the same TrainJob there has none
    (other,) = decoded(processor.process(None, event(job, "ADDED", cluster="lab"), MemoryStates()).records)
    assert (other["total"]["pods"], other["references"][0]["found"]) == (0, False)


def test_referenced_objects_are_kept_newest_first_and_forgotten_when_deleted(processor):
    job = copy.deepcopy(example_objects("trainjob")["llama-finetune"])
    state = MemoryStates()
    processor.process(None, event(_runtime(rv="20"), "ADDED"), state)
    older = _runtime(rv="15")
    older["spec"]["mlPolicy"]["numNodes"] = 99
    processor.process(None, event(older, "MODIFIED"), state)        # an older version read late: ignored
    del job["spec"]["trainer"]                                       # numNodes from the runtime's mlPolicy
    job["metadata"]["resourceVersion"] = "1"
    (record,) = decoded(processor.process(None, event(job), state).records)
    nodes = next(c for c in record["components"] if c["instance"] == "node")
    assert nodes["pods"] == 1
    processor.process(None, event(_runtime(rv="21"), "DELETED"), state)
    job["metadata"]["resourceVersion"] = "2"
    (record,) = decoded(processor.process(None, event(job), state).records)
    assert record["references"][0]["found"] is False and record["total"]["pods"] == 0


def test_a_worker_learns_referenced_objects_from_the_definitions_topic():
    """What another worker published (app.py reads the definitions topic into apply_definition)."""
    first, second = Processor(), Processor()
    out = first.process(None, event(_runtime(), "ADDED"), MemoryStates())
    ((_, value),) = out.definitions
    assert second.apply_definition(json.loads(value)) is True
    job = example_objects("trainjob")["llama-finetune"]
    (record,) = decoded(second.process(None, event(job, "ADDED"), MemoryStates()).records)
    assert record["total"]["pods"] == 4


def test_a_workload_seen_before_its_runtime_is_resolved_again_when_it_arrives(processor):
    """The TrainJob first resolves without its runtime (no pods; the record says which object was
    missing); the runtime's event on the same state store resolves it again: a second record of the
    same resourceVersion, with the pods and found: true. Once found, a re-delivered or newer runtime
    makes no record of its own."""
    state = MemoryStates()
    job = example_objects("trainjob")["llama-finetune"]
    (first,) = decoded(processor.process(None, event(job, "ADDED"), state).records)
    assert (first["total"]["pods"], first["references"][0]["found"]) == (0, False)
    out = processor.process(None, event(_runtime(), "ADDED", at="2026-11-01T00:00:05.000Z"), state)
    (again,) = decoded(out.records)
    assert again["resourceVersion"] == first["resourceVersion"]
    assert (again["total"]["pods"], again["references"][0]["found"]) == (4, True)
    assert again["observedAt"] == "2026-11-01T00:00:05.000Z" and again["statusSince"] == first["statusSince"]
    assert decoded(processor.process(None, event(_runtime(), "MODIFIED"), state).records) == []
    assert decoded(processor.process(None, event(_runtime(rv="11"), "MODIFIED"), state).records) == []
    # the warehouse keeps both facts of that one version (what each was resolved with is in its key)
    from workloadmap.warehouse.checking import check_record
    assert check_record({**first, "cluster": "prod"})[9] == first["resourceVersion"] + "#0"
    assert check_record({**again, "cluster": "prod"})[9] == first["resourceVersion"] + "#1"


def test_a_workload_waiting_on_another_state_store_is_resolved_by_the_relayed_copy(processor):
    """In the faust app a cluster-scoped runtime's event is processed on another partition's store
    than the TrainJob's: it is relayed (a copy marked relayed, for every other raw partition), and the
    copy processed on the TrainJob's store resolves it again there (4 pods, 32 GPUs: numNodes 4 of
    8 GPUs each, the initializer done). The copy is not published or relayed again."""
    jobs, runtimes = MemoryStates(), MemoryStates()
    job = example_objects("trainjob")["llama-finetune"]
    processor.process(None, event(job, "ADDED"), jobs)
    out = processor.process(b"prod/torch-distributed", event(_runtime(), "ADDED"), runtimes)
    assert out.records == [] and len(out.definitions) == 1
    ((key, relay),) = out.relays
    assert key == b"prod/torch-distributed" and json.loads(relay)["relayed"] is True
    again = processor.process(key, relay, jobs)
    (record,) = decoded(again.records)
    assert (record["total"]["pods"], record["total"]["gpu"], record["references"][0]["found"]) == (4, 32, True)
    assert again.definitions == [] and again.relays == [] and again.dead_letters == []
    assert decoded(processor.process(key, relay, jobs).records) == []   # a second copy: nothing new


def test_a_waiting_workload_is_kept_in_the_state_topic_until_resolved(processor):
    """What a new owner of the partition rebuilds its waiting workloads from (app.py's recovery): the
    TrainJob's raw event under `waiting:<cluster>/<uid>` while its runtime is missing, a tombstone
    once resolved. A store recovered from those messages resolves it at the relay."""
    job = example_objects("trainjob")["llama-finetune"]
    state = MemoryStates()
    first = processor.process(None, event(job, "ADDED"), state)
    uid = job["metadata"]["uid"]
    ((key, value),) = [(k, v) for k, v in first.state if k.startswith(b"waiting:")]
    assert key == f"waiting:prod/{uid}".encode()
    kept = json.loads(value)
    assert kept["workload"]["object"]["metadata"]["uid"] == uid
    assert kept["lacks"] == [["trainer.kubeflow.org", "ClusterTrainingRuntime", None, "torch-distributed"]]
    # a new owner of the partition, in another process: the state topic's messages (the record's summary too)
    recovered = MemoryStates.from_state(first.state)
    assert recovered[f"prod/{uid}"] == state[f"prod/{uid}"]
    fresh = Processor()
    relay = fresh.process(None, event(_runtime(), "ADDED"), MemoryStates()).relays[0][1]
    out = fresh.process(None, relay, recovered)
    (record,) = decoded(out.records)
    assert record["total"]["pods"] == 4
    assert (key, None) in out.state
    assert MemoryStates.from_state(first.state + out.state).waiting.events == {}


def test_a_workload_failing_to_resolve_with_its_runtime_is_dead_lettered_and_the_others_go_on(processor):
    """A runtime whose template the definition cannot read: the TrainJob waiting for it gets a dead letter
    naming the runtime (with the TrainJob's raw event, so it can be replayed), the runtime itself is kept."""
    state = MemoryStates()
    job = example_objects("trainjob")["llama-finetune"]
    processor.process(None, event(job, "ADDED"), state)
    broken = _runtime()
    broken["spec"]["template"]["spec"]["replicatedJobs"] = "not a list"
    out = processor.process(None, event(broken, "ADDED"), state)
    assert out.records == [] and len(out.definitions) == 1 and len(out.relays) == 1
    (letter,) = [json.loads(v) for _, v in out.dead_letters]
    assert "resolved again with ClusterTrainingRuntime torch-distributed" in letter["detail"]
    assert json.loads(base64.b64decode(letter["valueBase64"]))["object"]["metadata"]["name"] == "llama-finetune"


def test_a_relayed_event_of_an_object_no_reference_names_is_dead_lettered(processor):
    job = example_objects("trainjob")["llama-finetune"]
    relay = json.dumps({**json.loads(event(job, "ADDED")), "relayed": True}).encode()
    out = processor.process(None, relay, MemoryStates())
    assert out.records == []
    (letter,) = [json.loads(v) for _, v in out.dead_letters]
    assert letter["reason"] == records.WRONG_TYPES and "TrainJob is not one" in letter["detail"]


# -- a workload of a kind its cluster defines, arriving before the definition ------------------

T1 = "2026-11-01T00:00:03.000Z"


def _after(seconds):
    """T0 and `seconds`, as the watchers write an observedAt."""
    return (records.parse_time(T0) + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _widget_definition(rv="1"):
    """A cluster's own kind (example.com/v1 BatchWidget) described as the built-in Job is."""
    doc = yaml.safe_load(open("catalog/builtin/job.yaml"))
    doc["metadata"] = {"name": "batch-widget", "uid": "def-widget", "resourceVersion": rv}
    doc["spec"]["structureDefinition"]["rootComponent"]["kind"] = {"group": "example.com", "version": "v1",
                                                                    "kind": "BatchWidget"}
    return doc


def _widget(rv="5"):
    obj = copy.deepcopy(next(iter(example_objects("job").values())))
    obj["apiVersion"], obj["kind"] = "example.com/v1", "BatchWidget"
    obj["metadata"].update(uid="widget-uid", resourceVersion=rv)
    return obj


@pytest.fixture
def worker():
    """A processor as the faust worker makes it: unknown kinds wait for their definition."""
    return Processor(kind_wait=KIND_WAIT)


def test_a_workload_of_an_unknown_kind_waits_and_resolves_at_the_relayed_definition(worker):
    """The worker's race: the BatchWidget reaches its partition's store before the WorkloadMap that
    defines it is processed on another store. It waits (no record, no dead letter), the definition's
    event is published and relayed, and the relayed copy resolves it on its store with its own
    observedAt (T0: it was in that state then; the definition came at T1)."""
    widgets, definitions = MemoryStates(), MemoryStates()
    first = worker.process(b"prod/default", event(_widget(), "ADDED", at=T0), widgets, partition=1, offset=7)
    assert first.records == [] and first.dead_letters == []
    assert list(widgets.waiting.events) == ["prod/widget-uid"]
    out = worker.process(b"prod", event(_widget_definition(), "ADDED", at=T1), definitions)
    assert out.records == [] and out.dead_letters == [] and len(out.definitions) == 1
    ((key, relay),) = out.relays
    assert key == b"prod" and json.loads(relay)["relayed"] is True
    again = worker.process(key, relay, widgets)
    (record,) = decoded(again.records)
    assert (record["kind"], record["definition"], record["origin"]) == ("BatchWidget", "batch-widget", "cluster")
    assert record["observedAt"] == T0 and record["statusSince"] == T0 and record["eventType"] == "ADDED"
    assert again.definitions == [] and again.relays == [] and again.dead_letters == []
    assert (b"waiting:prod/widget-uid", None) in again.state and widgets.waiting.events == {}
    assert worker.process(key, relay, widgets).records == []   # a second copy: nothing new


def test_a_newer_event_replaces_the_waiting_one_and_a_deletion_drops_it(worker):
    state = MemoryStates()
    worker.process(None, event(_widget("5"), "ADDED"), state, partition=1, offset=7)
    worker.process(None, event(_widget("6"), at=T1), state, partition=1, offset=8)
    worker.process(None, event(_widget("5"), "ADDED"), state, partition=1, offset=9)   # a re-delivery
    assert state.waiting.events["prod/widget-uid"]["object"]["metadata"]["resourceVersion"] == "6"
    # waiting since the first event (T0), its dead letter would carry the newer one's bytes and offset
    assert state.waiting.since["prod/widget-uid"] == (records.parse_time(T0).timestamp(), 1, 8)
    out = worker.process(None, event(_widget("7"), "DELETED", at=T1), state)
    assert out.records == [] and out.dead_letters == [] and (b"waiting:prod/widget-uid", None) in out.state
    assert state.waiting.events == {} and state.waiting.since == {}


def test_a_wait_for_a_kind_survives_a_state_recovery(worker):
    """A new owner of the partition rebuilds the wait from the state topic (since when and where the
    raw event was, for its dead letter) and resolves it at the relay."""
    state = MemoryStates()
    first = worker.process(b"prod/default", event(_widget(), "ADDED"), state, partition=1, offset=7)
    ((key, value),) = [(k, v) for k, v in first.state if k.startswith(b"waiting:")]
    assert key == b"waiting:prod/widget-uid"
    assert json.loads(value)["lacks"] == [["example.com", "BatchWidget"]]
    recovered = MemoryStates.from_state(first.state)
    assert recovered.waiting.since == state.waiting.since
    fresh = Processor(kind_wait=KIND_WAIT)
    relay = fresh.process(b"prod", event(_widget_definition(), "ADDED", at=T1), MemoryStates()).relays[0][1]
    (record,) = decoded(fresh.process(b"prod", relay, recovered).records)
    assert record["definition"] == "batch-widget" and record["observedAt"] == T0


def test_a_workload_waiting_too_long_for_its_kind_is_dead_lettered_saying_so(worker):
    """KIND_WAIT seconds of the partition's event time after its event, the next event of the partition
    gives it up: an unknown-kind dead letter with its raw bytes, raw partition and offset."""
    state = MemoryStates()
    raw = event(_widget(), "ADDED", at=T0)
    worker.process(b"prod/default", raw, state, partition=1, offset=7)
    just_before = _after(KIND_WAIT - 1)
    assert worker.process(None, event(_jobset(), "ADDED", at=just_before), state).dead_letters == []
    at_bound = _after(KIND_WAIT)
    out = worker.process(None, event(_jobset("101"), at=at_bound), state)
    (letter,) = decoded(out.dead_letters)
    assert letter["reason"] == records.UNKNOWN_KIND and (letter["partition"], letter["offset"]) == (1, 7)
    assert "no definition for kind 'BatchWidget'" in letter["detail"]
    assert f"waited {KIND_WAIT:g} s of event time" in letter["detail"]
    assert json.loads(base64.b64decode(letter["valueBase64"])) == json.loads(raw)
    assert (b"waiting:prod/widget-uid", None) in out.state and state.waiting.events == {}
    assert len(decoded(out.records)) == 1   # the event in hand is processed as ever


def test_the_waits_for_kinds_of_a_partition_are_bounded_in_count(worker, monkeypatch):
    monkeypatch.setattr(processing, "MAX_KIND_WAITING", 2)
    state = MemoryStates()
    for i, at in enumerate((T0, T1, "2026-11-01T00:00:04.000Z")):
        widget = _widget()
        widget["metadata"]["uid"] = f"w{i}"
        out = worker.process(None, event(widget, "ADDED", at=at), state, partition=0, offset=i)
    (letter,) = decoded(out.dead_letters)
    assert letter["offset"] == 0 and "2 workloads of this partition waited" in letter["detail"]
    assert sorted(state.waiting.events) == ["prod/w1", "prod/w2"]


def test_the_embedded_processor_dead_letters_an_unknown_kind_at_once(processor):
    """One store in feed order: a definition published first is applied first, nothing to wait for."""
    out = processor.process(None, event(_widget(), "ADDED"), MemoryStates())
    assert [d["reason"] for d in decoded(out.dead_letters)] == [records.UNKNOWN_KIND]


def test_a_partition_given_up_leaves_no_component_tree_of_its_objects_in_the_resolver(processor):
    """processors/app.py: a worker that no longer owns a raw partition drops its store and the resolver's
    trees of its objects (no event of them comes to this worker again, their deletions neither, so
    nothing else would ever drop those trees); the other partitions' trees stay."""
    given_up, kept = MemoryStates(), MemoryStates()
    mine, other = _jobset(), _jobset()
    other["metadata"]["uid"] = "another-uid"
    out = processor.process(b"k", event(mine, "ADDED"), given_up)
    processor.process(b"k", event(other, "ADDED"), kept)
    # two state topic messages (its owner link: pods are attributed through it, and its summary),
    # and the store holds those two entries
    assert sorted(k.split(b":")[0] for k, _ in out.state) == [b"owner", b"workload"] and given_up.objects() == 2
    assert given_up.uids() == {mine["metadata"]["uid"]} and kept.uids() == {"another-uid"}
    assert processor.cached_uids() == {mine["metadata"]["uid"], "another-uid"}   # JobSets' trees are cached
    processor.forget_objects(given_up.uids())
    assert processor.cached_uids() == {"another-uid"}
    # the kept object's next status update still resolves (from its cached tree)
    newer = _jobset(rv="101")
    newer["metadata"]["uid"] = "another-uid"
    (record,) = decoded(processor.process(b"k", event(newer), kept).records)
    assert record["resourceVersion"] == "101" and record["total"]["gpu"] == 64
