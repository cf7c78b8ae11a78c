"""Benchmark: the exporter's ingest rate, memory and /metrics scrape time at fleet scale.

Builds --workloads workload records (real records: each catalog example run once through the
processors, then copied with its own uid, name, namespace and cluster) and --pods pod records
(tests/allocation_records.py, the pod-record schema's fields: --pods / --workloads pods per
workload over its components, 80 % Bound, 20 % Pending), all JSON-encoded first, as Kafka would
hand them over.  Then, in one process and one thread (the consumer's):

- ingest: ``Tracker.apply_batch`` in batches of 5,000, workload records first, then pod records,
  then one status change per workload (the steady state's commonest record); records per second
  of CPU time and CPU microseconds per record, for each;
- memory: resident memory (RSS) added by the workloads, divided by the workloads, and by the pods,
  divided by the pods (it includes what the allocator keeps);
- scrape: an HTTP GET of /metrics without compression (the text streamed part by part); the
  compression of every part once (``refresh``, what the consumer does when caught up); HTTP GETs
  of /metrics with gzip, as Prometheus scrapes, through ``MetricsServer`` (wall seconds, median
  of --rounds): with nothing changed, and after --churn status changes each (their parts are
  compressed again within the scrape).

Targets (issue 29): >= 20,000 records/s on one core; /metrics <= 2 s at 100,000 workloads and
1,000,000 pods.  Prints one JSON line.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.allocation_records import pod  # noqa: E402
from workloadmap.catalog import Catalog, records  # noqa: E402
from workloadmap.exporter.serving import MetricsServer  # noqa: E402
from workloadmap.exporter.tracking import PODS, WORKLOADS, Tracker  # noqa: E402
from workloadmap.processors.processing import MemoryStates, Processor  # noqa: E402

KINDS = ("pytorchjob", "jobset", "raycluster", "rayjob", "mpijob", "leaderworkerset", "inferenceservice",
         "deployment", "statefulset", "job", "dynamographdeployment", "podcliqueset")


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def templates() -> list[dict]:
    """One real workload record per catalog example object of KINDS, as the processors publish it."""
    import yaml
    from importlib import resources

    catalog, processor, state = Catalog.builtin(), None, MemoryStates()
    processor = Processor(catalog)
    out = []
    for kind in KINDS:
        text = resources.files("workloadmap.catalog").joinpath(f"examples/{kind}.yaml").read_text()
        for obj in (d for d in yaml.safe_load_all(text) if d):
            result = processor.process(None, records.encode(records.raw_event("c0", "ADDED", obj)), state)
            out.extend(records.decode(v) for _, v in result.records)
    return out


class Fleet:
    """The bench's records, made on demand (encoded as Kafka hands them over): all of them at once would
    hold gigabytes the exporter does not, and the allocator keeps what they used."""

    def __init__(self, n_workloads: int, n_pods: int, clusters: int):
        self.base = templates()
        self.n_workloads, self.n_pods, self.clusters = n_workloads, n_pods, clusters
        self.per = max(1, n_pods // max(1, n_workloads))

    def record(self, i: int) -> dict:
        r = copy.copy(self.base[i % len(self.base)])
        r.update(uid=f"w{i}", name=f"{r['name']}-{i}", namespace=f"team-{i % 200}", cluster=f"cluster-{i % self.clusters}",
                 observedAt="2026-12-05T10:00:00Z", status="Running")
        return r

    def workload(self, i: int, degraded: bool = False) -> tuple:
        r = self.record(i)
        if degraded:
            r.update(status="Degraded", previousStatus="Running", observedAt="2026-12-05T10:05:00Z",
                     statusSince="2026-12-05T10:05:00Z")
        return WORKLOADS, records.encode(r), None

    def pods_of(self, i: int) -> list:
        r = self.record(i)
        names = [c["name"] for c in r["components"]] or ["main"]
        count = min(self.per, self.n_pods - i * self.per)
        return [(PODS, records.encode(pod(
            f"p{i}-{j}", r["observedAt"], "Bound" if j % 5 else "Pending", cluster=r["cluster"],
            node=f"node-{j}" if j % 5 else None, gpu=8, workload=(r["kind"], r["name"], r["uid"]),
            namespace=r["namespace"], name=f"{r['name']}-{names[j % len(names)]}-{j}", component=names[j % len(names)],
            replica=str(j))), None) for j in range(max(0, count))]

    def batches(self, what: str, size: int = 5000):
        """Batches of `what`: "workloads", "pods" or "changes" (every workload Running -> Degraded)."""
        batch: list = []
        for i in range(self.n_workloads):
            if what == "pods":
                batch.extend(self.pods_of(i))
            else:
                batch.append(self.workload(i, degraded=what == "changes"))
            if len(batch) >= size:
                yield batch
                batch = []
        if batch:
            yield batch


def ingest(tracker: Tracker, batches) -> dict:
    """Apply the batches; CPU time of the applying only (not of making the records)."""
    gc.collect()
    cpu, n = 0.0, 0
    for batch in batches:
        started = time.process_time()
        tracker.apply_batch(batch)
        cpu += time.process_time() - started
        n += len(batch)
    return {"records": n, "cpu_s": round(cpu, 2), "records_per_cpu_s": round(n / cpu),
            "cpu_us_per_record": round(cpu / n * 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", type=int, default=100_000)
    parser.add_argument("--pods", type=int, default=1_000_000)
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--churn", default="500,5000",
                        help="Status changes applied between two timed scrapes (comma-separated: one figure each).")
    args = parser.parse_args()

    gc.freeze()
    gc.set_threshold(50_000, 20, 100)   # as the services run (running.collect_garbage_rarely)
    fleet = Fleet(args.workloads, args.pods, args.clusters)
    tracker = Tracker()
    rss0 = rss_bytes()
    out = {"bench": "exporter", "workloads": args.workloads,
           "machine": f"{platform.node()} {os.cpu_count()} cores", "load_avg": os.getloadavg()[0]}
    out["ingest_workloads"] = ingest(tracker, fleet.batches("workloads"))
    rss1 = rss_bytes()
    out["ingest_pods"] = ingest(tracker, fleet.batches("pods"))
    out["pods"] = out["ingest_pods"]["records"]
    rss2 = rss_bytes()
    out["ingest_status_changes"] = ingest(tracker, fleet.batches("changes"))
    out["rss_bytes_per_workload"] = round((rss1 - rss0) / args.workloads)
    out["rss_bytes_per_pod"] = round((rss2 - rss1) / max(1, out["pods"]))
    out["rss_mib"] = round(rss_bytes() / 2**20)

    series = tracker.series()
    started = time.perf_counter()
    tracker.refresh()   # every part compressed once: what the consumer does when it has caught up
    cold = time.perf_counter() - started
    with MetricsServer("127.0.0.1:0", tracker.exposition_parts, exposition_gzip=tracker.exposition_gzip) as server:
        def get(encoding="gzip") -> tuple[float, int]:
            started = time.perf_counter()
            request = urllib.request.Request(f"http://127.0.0.1:{server.port}/metrics",
                                             headers={"Accept-Encoding": encoding})
            n = 0
            with urllib.request.urlopen(request, timeout=600) as response:
                while chunk := response.read(1 << 20):
                    n += len(chunk)
            return time.perf_counter() - started, n
        text = get("identity")
        idle = [get() for _ in range(args.rounds)]
        # scrapes after --churn status changes of random workloads each, as between two scrapes of a
        # fleet in its steady state (Degraded -> Running -> Degraded ...)
        rng = random.Random(1)
        busy = {}
        for n in (int(c) for c in str(args.churn).split(",")):
            picked = rng.sample(range(args.workloads), min(n, args.workloads))
            back = [fleet.workload(i) for i in picked]
            forth = [fleet.workload(i, degraded=True) for i in picked]
            times = []
            for round_ in range(args.rounds):
                tracker.apply_batch(back if round_ % 2 == 0 else forth)
                times.append(get()[0])
            busy[n] = round(statistics.median(times), 3)
    out["scrape"] = {"series": series, "bytes": text[1], "http_get_text_s": round(text[0], 3),
                     "gzip_bytes": idle[0][1],
                     "compress_all_parts_s": round(cold, 3),
                     "http_get_gzip_s": round(statistics.median(t for t, _ in idle), 3),
                     "http_get_gzip_after_status_changes_s": busy}
    out["targets"] = {"records_per_cpu_s": 20_000, "scrape_s": 2.0, "at": "100,000 workloads, 1,000,000 pods"}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
