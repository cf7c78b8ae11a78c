"""A real Prometheus server (Debian's `prometheus` package) on loopback, for tests of the exporter's series.

Started per test with its own scrape targets, its own TSDB in a temporary folder, a 1 s scrape and
rule evaluation interval, and the given rule files; queried over its HTTP API.  When the binary is
missing the tests that need it FAIL, unless the user opted out with ``WORKLOADMAP_NO_PROMETHEUS=1``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

NO_PROMETHEUS_ENV = "WORKLOADMAP_NO_PROMETHEUS"
INTERVAL_S = 1


def prometheus_binary(name: str = "prometheus") -> str:
    """The path of `name` (prometheus or promtool); a test failure naming the package when missing."""
    found = shutil.which(name)
    if found is None:
        if os.environ.get(NO_PROMETHEUS_ENV) == "1":
            pytest.skip(f"{NO_PROMETHEUS_ENV}=1: tests needing a real Prometheus are opted out")
        pytest.fail(f"{name} is not installed (apt-get install -y prometheus); set {NO_PROMETHEUS_ENV}=1 to run "
                    f"without the tests that need it", pytrace=False)
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """``Prometheus(tmp, jobs={"name": {"target": "127.0.0.1:port", "labels": {...}}}, rules=[paths])``."""

    def __init__(self, folder: Path, jobs: dict, rules=()):
        self.folder = Path(folder)
        self.port = free_port()
        config = {
            "global": {"scrape_interval": f"{INTERVAL_S}s", "evaluation_interval": f"{INTERVAL_S}s",
                       "scrape_timeout": f"{INTERVAL_S}s"},
            "rule_files": [str(r) for r in rules],
            "scrape_configs": [{"job_name": name, "honor_labels": True,
                                "static_configs": [{"targets": [job["target"]], "labels": job.get("labels", {})}]}
                               for name, job in jobs.items()],
        }
        (self.folder / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = self.folder / "prometheus.log"
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> "Prometheus":
        binary = prometheus_binary()
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [binary, f"--config.file={self.folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.folder / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 "--storage.tsdb.retention.time=1h"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready in {timeout} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:]) if self.log.exists() else ""

    def api(self, path: str, **params) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as exc:
            return json.load(exc)

    def query(self, expr: str) -> dict:
        """{frozenset of labels (without __name__): value} of an instant query; AssertionError if it fails."""
        body = self.api("query", query=expr)
        assert body["status"] == "success", (expr, body)
        return {frozenset((k, v) for k, v in s["metric"].items() if k != "__name__"): float(s["value"][1])
                for s in body["data"]["result"]}

    def wait_for(self, expr: str, check, timeout: float = 15.0):
        """Query `expr` until `check(result)` holds; the last result is in the AssertionError otherwise."""
        deadline, result = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            result = self.query(expr)
            if check(result):
                return result
            time.sleep(0.2)
        raise AssertionError(f"{expr}: {result}\n{self.log_tail()}")

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> "Prometheus":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
