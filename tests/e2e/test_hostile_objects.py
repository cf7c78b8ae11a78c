"""One hostile object never stops the pipeline, and a failure that does stop it is loud.

A JobSet asking for `nvidia.com/gpu: "-3"` (the API server accepts it: the pod
template of a custom resource is not validated as a pod) is a resolve error naming
the field: a dead letter in the embedded watchers and through Kafka, while the
workloads around it still land.  A publisher that cannot write stops every watcher
at once and fails `run watchers` with one line and exit status 1, instead of a
thread dying while the process stays up.
"""

from __future__ import annotations

import copy
import threading
import time

import duckdb
import pytest

from tests import kube_objects as k
from tests.e2e.test_kube_e2e import embedded_watchers
from tests.e2e.test_pipeline_e2e import pipeline_on  # noqa: F401 - the fixture
from tests.ingest.test_watching import cluster_of
from workloadmap.catalog import Catalog, records
from workloadmap.embedding import EmbeddedPipeline
from workloadmap.ingest.watching import Watching
from workloadmap.warehouse.writing import Warehouse

NEGATIVE_FIELD = "containers[0].resources.requests[nvidia.com/gpu]: '-3' is negative"


def negative_jobset(name: str = "negative") -> dict:
    obj = k.example("JobSet")
    obj["metadata"]["name"] = name
    template = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    template["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "-3"}}
    return obj


def latest(db, ns) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("""SELECT name, status FROM workload_states WHERE namespace = ?
                              QUALIFY row_number() OVER (PARTITION BY uid ORDER BY seq DESC) = 1 ORDER BY name""",
                           [ns]).fetchall()
    finally:
        con.close()


def test_a_negative_quantity_in_the_embedded_watchers_is_a_dead_letter_and_later_workloads_land(
        kube_cluster, tmp_path):
    ns = k.namespace(kube_cluster, "hostile")
    k.create(kube_cluster, negative_jobset(), ns)
    k.create(kube_cluster, k.example("MPIJob", "tensorflow-benchmarks"), ns)
    with embedded_watchers(kube_cluster, tmp_path) as (proc, db, log):
        # after the bad object: a workload created later still arrives
        k.create(kube_cluster, k.example("RayJob", "mnist-train"), ns)
        time.sleep(7)   # past a checkpoint: the in-process pipeline flushes before each one
        assert proc.poll() is None, log.read_text()
    text = log.read_text()
    assert f"dead letter (processor, {records.RESOLVE_ERROR}): JobSet {ns}/negative" in text
    assert NEGATIVE_FIELD in text
    mpijob = Catalog.builtin().resolve(k.example("MPIJob", "tensorflow-benchmarks")).status
    rayjob = Catalog.builtin().resolve(k.example("RayJob", "mnist-train")).status
    assert latest(db, ns) == [("mnist-train", rayjob), ("tensorflow-benchmarks", mpijob)]


def test_a_negative_quantity_through_kafka_is_a_dead_letter_naming_the_field(kafka_broker, pipeline_on):
    p = pipeline_on(kafka_broker.bootstrap_servers)
    p.start("processors")
    p.start("warehouse")
    good = k.example("JobSet")
    good["metadata"].update(namespace="ns", uid="good-uid")
    bad = negative_jobset()
    bad["metadata"].update(namespace="ns", uid="bad-uid")
    events = [records.raw_event("c1", "ADDED", obj, "2026-11-01T00:00:00Z") for obj in (bad, good)]
    p.publish([(f"c1/{e['object']['metadata']['uid']}".encode(), records.encode(e), None) for e in events])
    p.wait_for_records(1)
    deadline = time.time() + 60
    while not (letters := p.dead_letters()) and time.time() < deadline:
        time.sleep(0.5)
    (letter,) = letters
    assert (letter["stage"], letter["reason"], letter["key"]) == ("processor", records.RESOLVE_ERROR, "c1/bad-uid")
    assert NEGATIVE_FIELD in letter["detail"] and "JobSet ns/negative" in letter["detail"]
    assert p.warehouse_rows("SELECT uid FROM workload_states") == [("good-uid",)]


def test_a_publisher_that_cannot_write_stops_every_watcher_and_says_why(kube_cluster, tmp_path):
    ns = k.namespace(kube_cluster, "hostile")
    k.create(kube_cluster, k.example("MPIJob", "tensorflow-benchmarks"), ns)
    warehouse = Warehouse(tmp_path / "w.duckdb")
    pipeline = EmbeddedPipeline(warehouse, batch=1)   # every record is written at once
    warehouse.conn.close()   # the file is gone from under the writer: every write now raises
    stop = threading.Event()
    watching = Watching([cluster_of(kube_cluster)], Catalog.builtin(), pipeline, stop=stop).start()
    try:
        assert stop.wait(60), "the watchers went on after their publisher failed"
    finally:
        watching.close()
    assert watching.failure.startswith(f"publishing into {pipeline!r}: ")
    assert "\n" not in watching.failure
    assert not any(t.is_alive() for t in watching._threads)


@pytest.mark.parametrize("exc", [ZeroDivisionError("division by zero"), KeyboardInterrupt()])
def test_an_exception_escaping_a_watcher_thread_is_reported_not_lost(exc):
    from workloadmap.ingest.watching import guarded
    reported = []

    def run():
        raise copy.copy(exc)
    thread = threading.Thread(target=guarded(run, "watch-lab-x", lambda where, e: reported.append((where, e))))
    thread.start()
    thread.join(5)
    assert [(where, type(e)) for where, e in reported] == [("watch-lab-x", type(exc))]


def test_a_record_the_warehouse_refuses_is_a_dead_letter_and_its_batch_still_lands(tmp_path):
    """Defense in depth behind the catalog's checks: what reaches the embedded writer and cannot
    be stored (here a total of 2^31 pods, past the warehouse's int32 column) is dead-lettered
    alone; before, it failed its whole batch and, left pending, every later flush."""
    from tests.conftest import example_objects
    with EmbeddedPipeline.open(tmp_path / "w.duckdb", batch=1000) as pipeline:
        job = next(iter(example_objects("job").values()))
        pipeline.publish(records.raw_event("c1", "ADDED", job, "2026-11-01T00:00:00Z"))
        good = records.decode(pipeline._records[-1])
        bad = dict(good, uid="too-many", total=dict(good["total"], pods=2**31))
        pipeline._records.append(records.encode(bad))
        pipeline.flush()
        assert [(d["stage"], d["reason"]) for d in pipeline.dead_letters] == [("warehouse", records.WRONG_TYPES)]
        assert "total.pods" in pipeline.dead_letters[0]["detail"]
        rows = pipeline.warehouse.cursor().execute("SELECT uid FROM workload_states").fetchall()
        assert rows == [(good["uid"],)]
        later = str(int(job["metadata"]["resourceVersion"]) + 1)
        pipeline.publish(records.raw_event("c1", "MODIFIED", dict(job, metadata=dict(job["metadata"], resourceVersion=later)),
                                           "2026-11-01T00:01:00Z"))
        pipeline.flush()   # the next flush is not failed by the refused record
        rows = pipeline.warehouse.cursor().execute("SELECT uid, resource_version FROM workload_states").fetchall()
        assert sorted(rows) == [(good["uid"], good["resourceVersion"]), (good["uid"], later)]
    assert pipeline.counts["dead_letters"] == 1
