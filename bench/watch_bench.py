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

``--kind pods`` (issue 25): --objects Pods instead, bound to nodes, each owned by
one of a namespace's ReplicaSets and labelled as a JobSet's pods are, with an
env, a volume, a command and args the projection drops; the relist publishes
them as the pod watcher does (``catalog.attributing.project_pod`` with the
built-in catalog's pod paths).  Targets: >= 5,000 pods/s, <= 1 KiB RSS per
tracked pod.  CPU seconds of the relist process per pod are printed beside
the rate (the API server's own CPU is not in them).
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


def create_in_namespaces(kube: KubeAPIServer, n: int, namespaces: int, what: str, make) -> float:
    """Create `n` objects spread over `namespaces` new namespaces, `make(i, namespace)` giving each one's
    (collection path, body), over kept-alive connections (a TLS handshake per request would dominate)."""
    from workloadmap.ingest.clusters import ClusterSpec, connect

    cluster = connect(ClusterSpec.parse(f"bench={kube.kubeconfig}"))
    names = [f"bench-{i:02d}" for i in range(namespaces)]
    for ns in names:
        kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def create(i: int):
        cluster.request("POST", *make(i, names[i % namespaces]))

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for done, _ in enumerate(pool.map(create, range(n)), 1):
            if done % 10000 == 0:
                print(f"created {done}/{n} {what}", file=sys.stderr)
    cluster.close()
    return time.perf_counter() - t0


def create_objects(kube: KubeAPIServer, n: int, namespaces: int) -> float:
    """PyTorchJobs from the bundled example."""
    from tests import kube_objects as k

    template = k.example("PyTorchJob", "mnist-ddp")
    template.pop("status", None)
    for key in k.SERVER_FIELDS:
        template["metadata"].pop(key, None)

    def make(i: int, ns: str):
        body = copy.deepcopy(template)
        body["metadata"].update(name=f"job-{i:06d}", namespace=ns)
        return f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs", body

    return create_in_namespaces(kube, n, namespaces, "objects", make)


def create_pods(kube: KubeAPIServer, n: int, namespaces: int) -> float:
    """Pods as a JobSet's Jobs would create them (labels, an owner), bound to 100 nodes by nodeName."""

    def make(i: int, ns: str):
        job = i // 8
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {
                    "name": f"train-{job:05d}-{i % 8}", "namespace": ns,
                    "labels": {"jobset.sigs.k8s.io/jobset-name": f"train-{job // 16}",
                               "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                               "jobset.sigs.k8s.io/job-index": str(job % 16), "batch.kubernetes.io/job-name": f"train-{job}"},
                    "annotations": {"batch.kubernetes.io/job-completion-index": str(i % 8)},
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"train-{job}",
                                         "uid": f"00000000-0000-4000-8000-{job:012d}", "controller": True}]},
                "spec": {"nodeName": f"gpu-{i % 100:03d}", "schedulerName": "default-scheduler",
                         "containers": [{"name": "trainer", "image": "registry.example/train:1",
                                         "command": ["torchrun"], "args": ["--nproc-per-node=8", "train.py"],
                                         "env": [{"name": f"VAR_{e}", "value": "x" * 40} for e in range(8)],
                                         "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                                         "resources": {"requests": {"cpu": "8", "memory": "64Gi"},
                                                       "limits": {"nvidia.com/gpu": "8"}}}],
                         "volumes": [{"name": "data", "emptyDir": {}}]}}
        return f"/api/v1/namespaces/{ns}/pods", body

    return create_in_namespaces(kube, n, namespaces, "pods", make)


def relist(kubeconfig: str, page_size: int, kind: str = "pytorchjobs") -> dict:
    """One relist in this (fresh) process; the figures as a dict."""
    import resource as rusage
    import threading

    from workloadmap.catalog import Catalog, records
    from workloadmap.catalog.attributing import pod_paths, project_pod
    from workloadmap.ingest.clusters import ClusterSpec, connect
    from workloadmap.ingest.discovering import discover
    from workloadmap.ingest.watching import KindWatcher
    from workloadmap.running import collect_garbage_rarely

    cluster = connect(ClusterSpec.parse(f"bench={kubeconfig}"))
    served = discover(cluster)
    project = None
    if kind == "pods":
        resource = served.for_definition("", "v1", "Pod")
        paths = pod_paths(Catalog.builtin())
        project = lambda pod: project_pod(pod, paths)   # noqa: E731 - as ClusterWatcher._project_pod
    else:
        resource = served.for_definition("kubeflow.org", "v1", "PyTorchJob")
    sent = {"events": 0, "bytes": 0}

    def publish(event):
        sent["events"] += 1
        sent["bytes"] += len(records.encode(event))

    watcher = KindWatcher(cluster, resource, publish, threading.Event(), page_size=page_size, project=project,
                          on_controller=lambda ref: None)
    gc.collect()
    collect_garbage_rarely()   # as `run watchers` does
    before = rss_bytes()
    cpu0 = rusage.getrusage(rusage.RUSAGE_SELF)
    t0 = time.perf_counter()
    watcher.relist()
    seconds = time.perf_counter() - t0
    cpu1 = rusage.getrusage(rusage.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    gc.collect()
    after = rss_bytes()
    n = len(watcher.known)
    return {"kind": kind, "objects": n, "relist_seconds": round(seconds, 3), "objects_per_s": round(n / seconds),
            "cpu_us_per_object": round(cpu / n * 1e6, 1),
            "published_events": sent["events"], "published_mib": round(sent["bytes"] / 2**20, 1),
            "published_bytes_per_object": round(sent["bytes"] / max(1, sent["events"])),
            "page_size": page_size, "rss_before_mib": round(before / 2**20, 1), "rss_after_mib": round(after / 2**20, 1),
            "rss_bytes_per_object": round((after - before) / n), "tracked_bytes_per_object": round(deep_size(watcher.known) / n),
            "target_bytes_per_object": 1024 if kind == "pods" else 2048,
            **({"target_objects_per_s": 5000} if kind == "pods" else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--page-size", type=int, default=500)
    parser.add_argument("--kind", choices=("pytorchjobs", "pods"), default="pytorchjobs")
    parser.add_argument("--relist-only", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.relist_only:
        print(json.dumps(relist(args.relist_only, args.page_size, args.kind)))
        return
    with KubeAPIServer("bench") as kube:
        if args.kind == "pods":
            create_seconds = create_pods(kube, args.objects, args.namespaces)
        else:
            kube.apply_crds([CRD_DIR / "kubeflow.org_pytorchjobs.yaml"])
            create_seconds = create_objects(kube, args.objects, args.namespaces)
        out = subprocess.run([sys.executable, __file__, "--relist-only", str(kube.kubeconfig),
                              "--page-size", str(args.page_size), "--kind", args.kind],
                             check=True, capture_output=True, text=True)
        figures = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps({"benchmark": "watch_relist" if args.kind != "pods" else "watch_relist_pods", **figures,
                      "create_seconds": round(create_seconds, 1), "apiserver": kube.version,
                      "load_average": os.getloadavg()}))


if __name__ == "__main__":
    main()
