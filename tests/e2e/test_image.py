"""The image's promises to the chart: a non-root user, a read-only root filesystem, a small build context.

No Docker engine runs here, so what can be checked without one is: the Dockerfile's USER is the
numeric user the chart's securityContext runs as; the build context leaves out what a checkout
holds besides the sources; and the commands the rendered chart runs, with the chart's own
environment, do their work with every filesystem of this machine mounted read-only except the
volumes the chart mounts (an emptyDir at /tmp, the watchers' checkpoints, the writer's DuckDB
volume).  That last test runs each service in a mount namespace of its own (`unshare`), the
way a kubelet runs a container with `readOnlyRootFilesystem: true`: a write anywhere else fails
with EROFS, so a service that needs one fails its work here instead of in a user's cluster.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from tests import kube_objects as k
from tests.e2e.test_chart import helm_binary, pod_specs, render  # noqa: F401 (the fixture)
from tests.services.processes import free_ports

ROOT = Path(__file__).resolve().parents[2]
VALUES = ROOT / "charts" / "workloadmap" / "values.yaml"


def final_stage_user(dockerfile: str) -> tuple[int, int]:
    """The numeric `USER uid:gid` of the Dockerfile's last stage (a name would not let the
    kubelet check runAsNonRoot)."""
    stages = re.split(r"^FROM\s", dockerfile, flags=re.M)
    users = re.findall(r"^USER\s+(\S+)\s*$", stages[-1], flags=re.M)
    assert users, "the final stage sets no USER: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and gid.isdigit(), f"USER {users[-1]} is not numeric uid:gid"
    return int(uid), int(gid)


def test_the_image_runs_as_the_numeric_user_of_the_charts_security_context():
    uid, gid = final_stage_user((ROOT / "Dockerfile").read_text())
    pod = yaml.safe_load(VALUES.read_text())["podSecurityContext"]
    assert uid != 0 and pod["runAsNonRoot"] is True
    assert (pod["runAsUser"], pod["runAsGroup"]) == (uid, gid)


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves `path` (relative, /-separated) out of the build context: a pattern
    matches the path or one of its leading folders; `**/` matches at any depth (no `!` rules here)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        assert not pattern.startswith("!"), "exceptions are not read by this check"
        for prefix in prefixes:
            if fnmatch.fnmatchcase(prefix, pattern) or (
                    pattern.startswith("**/") and fnmatch.fnmatchcase(prefix.rsplit("/", 1)[-1], pattern[3:])):
                return True
    return False


def test_the_build_context_is_the_sources_without_the_checkouts_bulk():
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for bulk in (".venv/bin/python", ".git/objects/pack/x.pack", "catalog/__pycache__/records.cpython-311.pyc",
                 ".pytest_cache/v/cache", ".mypy_cache/3.11/x.json", ".hypothesis/examples/x",
                 "workloadmap.duckdb", "workloadmap.duckdb.wal", "workloadmap.egg-info/PKG-INFO",
                 "tests/e2e/test_image.py", "bench/soak.py"):
        assert ignored(bulk, patterns), bulk
    # what `pip install .` reads
    for source in ("pyproject.toml", "README.md", "catalog/builtin/jobset.yaml", "warehouse/queries",
                   "workloadmap/__init__.py", "ingest/watching.py", "exporter/serving.py"):
        assert not ignored(source, patterns), source


# The mount namespace of one service: the writable volumes are bound onto themselves first (a
# bind mount made after the read-only remount would be read-only too), then every other mount
# but /proc, /sys and /dev is remounted read-only; then the service replaces the shell.
READ_ONLY_ROOT = r"""
set -e
for dir in $WRITABLE; do mount --bind "$dir" "$dir"; done
awk '{print $5}' /proc/self/mountinfo | sort -u | while read -r mp; do
  case "$mp" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue;; esac
  case " $WRITABLE " in *" $mp "*) continue;; esac
  mount -o remount,bind,ro "$mp"
done
exec "$@"
"""


class ChartPod:
    """One rendered container's command and environment, run on this machine as the chart runs it:
    its volumes are folders under `root` (the only writable paths), its ports free local ones."""

    def __init__(self, name: str, spec: dict, root: Path, env: dict, kubeconfig: Path):
        (container,) = spec["containers"]
        self.name = name
        self.volumes = {m["mountPath"]: root / name / m["name"] for m in container["volumeMounts"]}
        for folder in self.volumes.values():
            folder.mkdir(parents=True)
        self.ports: dict[str, int] = {}
        args = []
        for arg in container["args"]:
            if re.fullmatch(r":\d+", arg):                         # a listening port of the pod
                self.ports[arg] = free_ports(1)[0]
                arg = f"127.0.0.1:{self.ports[arg]}"
            elif arg.endswith("=in-cluster"):                      # the service account: a kubeconfig here
                arg = arg.replace("=in-cluster", f"={kubeconfig}#cluster-a")
            args.append(self._on_volume(arg))
        assert args[0] == "workloadmap", args
        self.args = [sys.executable, "-m", "workloadmap", *args[1:]]
        chart_env = {e["name"]: self._on_volume(e["value"]) for e in container["env"] if "value" in e}
        self.env = {"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1",   # as the image sets them
                    **chart_env, **env,
                    # the chart leaves TMPDIR unset: temporary files go to /tmp, its emptyDir
                    "TMPDIR": str(self.volumes["/tmp"])}
        self.log = root / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def _on_volume(self, text: str) -> str:
        for mount, folder in self.volumes.items():
            if text == mount or text.startswith(mount + "/"):
                return str(folder) + text[len(mount):]
        return text

    def start(self) -> None:
        writable = " ".join(str(f) for f in self.volumes.values())
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY_ROOT, "sh", *self.args],
            env={**self.env, "WRITABLE": writable}, cwd="/", stdout=self.log.open("wb"), stderr=subprocess.STDOUT)

    def url(self, port: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[port]}{path}"

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"{self.name} did not stop on SIGTERM\n{self.output()}") from None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def _get(url: str) -> tuple[int | None, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return None, ""


def test_the_charts_commands_work_with_only_their_volumes_writable(helm_binary, kafka_broker, kube_cluster,  # noqa: F811
                                                                   tmp_path):
    run = uuid.uuid4().hex[:8]
    specs = pod_specs(render("wm", "wm", "single-cluster.yaml", sets=("warehouse.serve.enabled=true",)))
    env = {f"WORKLOADMAP_{t.upper()}_TOPIC": f"{t}-{run}" for t in
           ("raw", "workloads", "transitions", "deadletter", "definitions", "pods", "nodes", "state")}
    env.update(WORKLOADMAP_BOOTSTRAP_SERVERS=kafka_broker.bootstrap_servers, WORKLOADMAP_CLIENT_ID=f"image-{run}")
    pods = {name.removeprefix("wm-workloadmap-"): ChartPod(name.removeprefix("wm-workloadmap-"), spec, tmp_path,
                                                           env, kube_cluster.kubeconfig)
            for name, spec in specs.items()}
    assert set(pods) == {"watchers", "processors", "warehouse", "exporter"}
    for pod in pods.values():
        assert pod.env["HOME"] == str(pod.volumes["/tmp"]), "HOME is the emptyDir"
    ns = k.namespace(kube_cluster, "image")
    job = k.create(kube_cluster, k.example("PyTorchJob"), ns)
    name = job["metadata"]["name"]
    try:
        pods["processors"].start()     # it creates the topics the others read
        time.sleep(3)
        for service in ("warehouse", "exporter", "watchers"):
            pods[service].start()
        warehouse, exporter = pods["warehouse"], pods["exporter"]
        deadline = time.time() + 240
        while True:
            for pod in pods.values():
                assert pod.proc.poll() is None, f"{pod.name} exited:\n{pod.output()}"
            served = _get(warehouse.url(":8088", f"/api/v1/workloads/prod-a/{ns}/PyTorchJob/{name}"))[0] == 200
            metrics = _get(exporter.url(":9108", "/metrics"))[1]
            exported = f'workloadmap_workload_info{{cluster="prod-a",namespace="{ns}",workload="{name}"' in metrics
            if served and exported:
                break
            assert time.time() < deadline, "\n".join(f"--- {p.name}\n{p.output()}" for p in pods.values())
            time.sleep(1)
        for port_name, pod in ((":9109", pods["watchers"]), (":9110", warehouse), (":9108", exporter)):
            assert _get(pod.url(port_name, "/readyz"))[0] == 200, pod.name   # the chart's readiness probe
    finally:
        codes = {pod.name: pod.stop() for pod in pods.values() if pod.proc is not None}
        k.delete(kube_cluster, job)
    assert codes == dict.fromkeys(pods, 0), "\n".join(f"--- {p.name}\n{p.output()}" for p in pods.values())
    for pod in pods.values():
        for refused in ("Read-only file system", "Permission denied"):
            assert refused not in pod.output(), f"{pod.name}:\n{pod.output()}"
    # what they wrote is on their volumes: the DuckDB file, the checkpoints; the emptyDirs are left empty
    assert (warehouse.volumes["/var/lib/workloadmap/warehouse"] / "workloadmap.duckdb").is_file()
    assert list(pods["watchers"].volumes["/var/lib/workloadmap/watchers"].iterdir())
    for pod in pods.values():
        assert not list(pod.volumes["/tmp"].iterdir()), (pod.name, list(pod.volumes["/tmp"].iterdir()))


def test_a_write_outside_the_volumes_fails_in_that_namespace(tmp_path):
    """The check above proves something only if the namespace really refuses writes elsewhere."""
    volume = tmp_path / "volume"
    volume.mkdir()
    outside = tmp_path / "outside"
    script = f"touch {shlex.quote(str(volume / 'ok'))} && ! touch {shlex.quote(str(outside))} 2>/dev/null"
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY_ROOT, "sh",
                           "sh", "-c", script], env={**os.environ, "WRITABLE": str(volume)},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert (volume / "ok").exists() and not outside.exists()
