"""Benchmark: the live commands on a big cluster (issue 28), against a real kube-apiserver.

Starts an API server (tests/services/kube_api.py) with the JobSet CRD, creates --workloads
JobSets (the bundled `llama-pretrain` example) in one namespace and, in another, one JobSet
with --pods pods (owned by its Jobs, 8 per Job, labelled as the JobSet controller labels them,
bound to nodes; one in ten crash-looping so `describe` has broken pods to put first).  Then, in
a fresh subprocess (the creation's work does not count), each command runs --repeat times
through click as a user runs it (``get jobsets -n NS -o json`` and as a table, ``get all -n NS -o json``,
``describe jobset/big -n NS --pod-limit 5``), and prints one JSON line per command: the best
and median wall seconds and the CPU seconds of the command (the process's own; the API
server's CPU is not in them), beside the process start (interpreter, imports) measured apart,
and first the paged list alone (the API server's share of `get`).

Targets: `get` of 5,000 workloads <= 3 s, `describe` of a 2,000-pod workload <= 2 s (the pods
read with one paged list of the namespace).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.services.kube_api import CRD_DIR, KubeAPIServer  # noqa: E402

NS_GET, NS_BIG = "bench-get", "bench-big"


def _template() -> dict:
    from tests.conftest import example_objects

    body = copy.deepcopy(example_objects("jobset")["llama-pretrain"])
    body.pop("status", None)
    body["metadata"] = {"name": "x", "labels": body["metadata"].get("labels") or {}}
    return body


def seed(kube: KubeAPIServer, workloads: int, pods: int) -> float:
    from workloadmap.ingest.clusters import ClusterSpec, connect

    cluster = connect(ClusterSpec.parse(f"bench={kube.kubeconfig}"))
    for ns in (NS_GET, NS_BIG):
        kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    template = _template()
    jobsets = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{{}}/jobsets"

    def jobset(i: int):
        body = copy.deepcopy(template)
        body["metadata"]["name"] = f"train-{i:05d}"
        cluster.request("POST", jobsets.format(NS_GET), body)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(jobset, range(workloads)))
    big = copy.deepcopy(template)
    big["metadata"]["name"] = "big"
    big["spec"]["replicatedJobs"][1]["replicas"] = pods // 4
    big = cluster.request("POST", jobsets.format(NS_BIG), big)
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "big",
             "uid": big["metadata"]["uid"], "controller": True}
    jobs = []
    for j in range(pods // 8):
        job = cluster.request("POST", f"/apis/batch/v1/namespaces/{NS_BIG}/jobs", {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"big-workers-{j}", "labels": {"jobset.sigs.k8s.io/jobset-name": "big"},
                         "ownerReferences": [owner]},
            "spec": {"suspend": True, "template": {"spec": {"restartPolicy": "Never",
                                                            "containers": [{"name": "c", "image": "x"}]}}}})
        jobs.append(job)

    def pod(i: int):
        job = jobs[i // 8]
        meta = {"name": f"big-workers-{i // 8}-{i % 8}", "namespace": NS_BIG,
                "labels": {"jobset.sigs.k8s.io/jobset-name": "big", "jobset.sigs.k8s.io/replicatedjob-name": "workers",
                           "jobset.sigs.k8s.io/job-index": str(i // 8),
                           "batch.kubernetes.io/job-name": job["metadata"]["name"]},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
                                     "uid": job["metadata"]["uid"], "controller": True}]}
        created = cluster.request("POST", f"/api/v1/namespaces/{NS_BIG}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": f"gpu-{i % 250:03d}", "containers": [{
                "name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}})
        broken = i % 10 == 0
        created["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False" if broken else "True"}],
                             "containerStatuses": [{"name": "c", "ready": not broken, "restartCount": 3 if broken else 0,
                                                    "image": "x", "imageID": "",
                                                    "state": {"waiting": {"reason": "CrashLoopBackOff"}} if broken
                                                    else {"running": {}}}]}
        cluster.request("PUT", f"/api/v1/namespaces/{NS_BIG}/pods/{meta['name']}/status", created)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(pod, range(pods)))
    cluster.close()
    return time.perf_counter() - t0


COMMANDS = {
    "get": ["get", "jobsets", "-n", NS_GET, "-o", "json"],
    "get_table": ["get", "jobsets", "-n", NS_GET],
    "get_all": ["get", "all", "-n", NS_GET, "-o", "json"],
    "describe": ["describe", "jobset/big", "-n", NS_BIG, "--pod-limit", "5"],
    "describe_json": ["describe", "jobset/big", "-n", NS_BIG, "-o", "json"],
}


def raw_list(kubeconfig: str, repeat: int) -> dict:
    """The paged list `get` starts with, alone: what the API server (and parsing its pages) costs
    of the command, nothing resolved."""
    from workloadmap.ingest.clusters import ClusterSpec, connect

    cluster = connect(ClusterSpec.parse(f"bench={kubeconfig}"))
    walls, cpus = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        n = sum(len(page["items"]) for page in cluster.list_pages(
            f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NS_GET}/jobsets", chunk_size=500))
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    cluster.close()
    return {"command": f"(list of {n} jobsets, pages of 500)", "best_s": round(min(walls), 3),
            "median_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(cpus), 3),
            "output_bytes": 0}


def measure(kubeconfig: str, repeat: int) -> list[dict]:
    """Each command `repeat` times in this process (imports done once, as the first run pays them)."""
    from click.testing import CliRunner

    from workloadmap.cli.main import cli

    out = [raw_list(kubeconfig, repeat)]
    for name, args in COMMANDS.items():
        walls, cpus, size = [], [], 0
        for _ in range(repeat):
            w0, c0 = time.perf_counter(), time.process_time()
            result = CliRunner().invoke(cli, [*args, "--kubeconfig", kubeconfig])
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
            if result.exit_code != 0:
                raise SystemExit(f"{name}: exit {result.exit_code}: {result.output[-2000:]}")
            size = len(result.stdout)
        out.append({"command": " ".join(args), "best_s": round(min(walls), 3),
                    "median_s": round(statistics.median(walls), 3), "cpu_s": round(statistics.median(cpus), 3),
                    "output_bytes": size})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=5_000)
    parser.add_argument("--pods", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--measure-only", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_only:
        print(json.dumps(measure(args.measure_only, args.repeat)))
        return
    with KubeAPIServer("bench") as kube:
        kube.apply_crds([CRD_DIR / "jobset.x-k8s.io_jobsets.yaml"])
        seconds = seed(kube, args.workloads, args.pods)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import workloadmap.cli.main"], check=True)
        startup = time.perf_counter() - start
        out = subprocess.run([sys.executable, __file__, "--measure-only", str(kube.kubeconfig),
                              "--repeat", str(args.repeat)], check=True, capture_output=True, text=True)
        figures = json.loads(out.stdout.strip().splitlines()[-1])
    for figure in figures:
        print(json.dumps({"benchmark": "live_cli", **figure, "workloads": args.workloads, "pods": args.pods,
                          "process_start_s": round(startup, 2), "seed_s": round(seconds, 1),
                          "apiserver": kube.version, "load_average": os.getloadavg()}))


if __name__ == "__main__":
    main()
