"""Benchmark: a watcher's relist of many custom objects, on a real kube-apiserver.

Starts an API server (tests/services/kube_api.py) with the PyTorchJob CRD,
creates --objects PyTorchJobs (the bundled `mnist-ddp` example, ~2 KiB of
JSON each) over --namespaces namespaces, then measures in a fresh
subprocess (so the creation's memory does not count) one `KindWatcher.relist()`:
paged list (--page-size), a raw event built and JSON-encoded per object (what
the Kafka publisher sends; the broker itself is left out, see
pipeline_bench.py), the tracked set kept.

Figures (one JSON line): objects/s of the relist; resident memory (RSS) per
tracked object, i.e. RSS after the relist minus RSS before, divided by the
objects (it includes whatever the allocator keeps from parsing the pages);
and the exact size of the tracked set per object (deep `sys.getsizeof`).
Target: <= 2 KiB per tracked object.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.services.kube_api import CRD_DIR, KubeAPIServer  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def deep_size(tracked: dict) -> int:
    """Bytes of the tracked set: the dict, its uid keys, the tuples and their strings."""
    seen: set[int] = set()
    total = sys.getsizeof(tracked)
    for uid, entry in tracked.items():
        for obj in (uid, entry, *entry):
            if id(obj) not in seen:
                seen.add(id(obj))
                total += sys.getsizeof(obj)
    return total


def create_objects(kube: KubeAPIServer, n: int, namespaces: int) -> float:
    """Create the objects over kept-alive connections (a TLS handshake per request would dominate)."""
    from tests import kube_objects as k
    from workloadmap.ingest.clusters import ClusterSpec, connect

    cluster = connect(ClusterSpec.parse(f"bench={kube.kubeconfig}"))
    template = k.example("PyTorchJob", "mnist-ddp")
    template.pop("status", None)
    for key in k.SERVER_FIELDS:
        template["metadata"].pop(key, None)
    names = [f"bench-{i:02d}" for i in range(namespaces)]
    for ns in names:
        kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def create(i: int):
        body = copy.deepcopy(template)
        ns = names[i % namespaces]
        body["metadata"].update(name=f"job-{i:06d}", namespace=ns)
        cluster.request("POST", f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs", body)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for done, _ in enumerate(pool.map(create, range(n)), 1):
            if done % 5000 == 0:
                print(f"created {done}/{n} objects", file=sys.stderr)
    cluster.close()
    return time.perf_counter() - t0


def relist(kubeconfig: str, page_size: int) -> dict:
    """One relist in this (fresh) process; the figures as a dict."""
    import threading

    from workloadmap.catalog import records
    from workloadmap.ingest.clusters import ClusterSpec, connect
    from workloadmap.ingest.discovering import discover
    from workloadmap.ingest.watching import KindWatcher

    cluster = connect(ClusterSpec.parse(f"bench={kubeconfig}"))
    resource = discover(cluster).for_definition("kubeflow.org", "v1", "PyTorchJob")
    sent = {"events": 0, "bytes": 0}

    def publish(event):
        sent["events"] += 1
        sent["bytes"] += len(records.encode(event))

    watcher = KindWatcher(cluster, resource, publish, threading.Event(), page_size=page_size)
    gc.collect()
    before = rss_bytes()
    t0 = time.perf_counter()
    watcher.relist()
    seconds = time.perf_counter() - t0
    gc.collect()
    after = rss_bytes()
    n = len(watcher.known)
    return {"objects": n, "relist_seconds": round(seconds, 3), "objects_per_s": round(n / seconds),
            "published_events": sent["events"], "published_mib": round(sent["bytes"] / 2**20, 1),
            "page_size": page_size, "rss_before_mib": round(before / 2**20, 1), "rss_after_mib": round(after / 2**20, 1),
            "rss_bytes_per_object": round((after - before) / n), "tracked_bytes_per_object": round(deep_size(watcher.known) / n),
            "target_bytes_per_object": 2048}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--relist-only", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.relist_only:
        print(json.dumps(relist(args.relist_only, args.page_size)))
        return
    with KubeAPIServer("bench") as kube:
        kube.apply_crds([CRD_DIR / "kubeflow.org_pytorchjobs.yaml"])
        create_seconds = create_objects(kube, args.objects, args.namespaces)
        out = subprocess.run([sys.executable, __file__, "--relist-only", str(kube.kubeconfig),
                              "--page-size", str(args.page_size)], check=True, capture_output=True, text=True)
        figures = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps({"benchmark": "watch_relist", **figures, "create_seconds": round(create_seconds, 1),
                      "apiserver": kube.version}))


if __name__ == "__main__":
    main()
