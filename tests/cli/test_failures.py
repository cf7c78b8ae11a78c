"""What goes wrong outside the command is one line and an exit status, never a traceback (issue 27 item 4).

Each case runs the real `workloadmap` process: a damaged or locked warehouse, an
export directory that cannot be made, no Kafka broker (at once, not after the
clients' 30 s of retries), Ctrl-C inside a DuckDB query (DuckDB does not look at
Python's signal flag: `query` ignored it) exits 130.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from workloadmap.warehouse.writing import Warehouse

WORKLOADMAP = [sys.executable, "-m", "workloadmap"]


def run(*args, timeout=60):
    start = time.monotonic()
    proc = subprocess.run([*WORKLOADMAP, *args], capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.fixture(scope="module")
def demo_warehouse(tmp_path_factory):
    path = tmp_path_factory.mktemp("failures") / "demo.duckdb"
    code, _, err, _ = run("demo", "--duckdb", str(path), "--workloads", "20", "--days", "2")
    assert code == 0, err
    return path


@pytest.fixture
def no_broker():
    """An address where nothing listens (a port just freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


def test_demo_on_a_damaged_warehouse(demo_warehouse, tmp_path):
    damaged = tmp_path / "damaged.duckdb"
    damaged.write_bytes(demo_warehouse.read_bytes()[:5000])
    code, _, err, _ = run("demo", "--duckdb", str(damaged), "--workloads", "5", "--days", "1")
    assert code == 1
    assert one_line(err).startswith(f"error: {damaged} is not a workloadmap warehouse this DuckDB can open")
    code, _, err, _ = run("feed", "--duckdb", str(damaged))
    assert code == 1 and one_line(err).startswith(f"error: {damaged}: ")


def test_demo_on_a_warehouse_another_process_writes(tmp_path):
    path = tmp_path / "held.duckdb"
    with Warehouse(path):   # this process holds DuckDB's write lock on the file
        code, _, err, _ = run("demo", "--duckdb", str(path), "--workloads", "5", "--days", "1")
    assert code == 1
    assert one_line(err).startswith(f"error: {path} is held by another process")


def test_export_where_its_directory_cannot_be_made(demo_warehouse, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err, _ = run("export", "--duckdb", str(demo_warehouse), "--parquet", str(blocker / "out"))
    assert code == 1 and one_line(err) == f"error: {blocker / 'out'}: Not a directory"


def test_no_broker_is_said_at_once(no_broker, tmp_path):
    code, _, err, took = run("replay", "--workloads", "5", "--days", "1", "--bootstrap-servers", no_broker,
                             "--duckdb", str(tmp_path / "w.duckdb"))
    assert code == 1 and took < 15
    assert one_line(err) == (f"error: no Kafka broker at {no_broker} ({no_broker}: Connection refused); "
                             f"start one (`docker compose up -d kafka`) or give --bootstrap-servers")


@pytest.mark.parametrize("service", ["warehouse", "processors"])
def test_a_service_waits_broker_wait_seconds_for_its_broker_then_says_there_is_none(service, no_broker, tmp_path,
                                                                                     monkeypatch):
    """A service rides out a broker restart at its start (settings.broker_wait), saying so each time
    it tries again (0.5, 1, 2 s apart), and ends with the one line of a missing broker."""
    monkeypatch.setenv("WORKLOADMAP_BROKER_WAIT", "3")
    code, _, err, took = run("run", service, "--bootstrap-servers", no_broker, "--duckdb", str(tmp_path / "w.duckdb"))
    assert code == 1 and 3 <= took < 15, err
    assert "Traceback" not in err, err
    *waits, last = err.strip().splitlines()
    # the services log their waits (with a timestamp, level and logger where the service logs so)
    waits = [re.sub(r"^\d{4}-\d\d-\d\d [\d:,]+ WARNING [\w.]+: ", "", w) for w in waits]
    assert last == (f"error: no Kafka broker at {no_broker} ({no_broker}: Connection refused); "
                    f"start one (`docker compose up -d kafka`) or give --bootstrap-servers")
    assert waits[:2] == [f"no Kafka broker at {no_broker} ({no_broker}: Connection refused); start one (`docker "
                         f"compose up -d kafka`) or give --bootstrap-servers: trying again in {s} s" for s in ("0.5", "1.0")]
    assert all("trying again in" in w for w in waits) and len(waits) <= 3, err


def _as_from_a_terminal():
    # Ctrl-C as a terminal delivers it: a test run started in the background by a shell without job
    # control (nohup ... &, a CI runner) has SIGINT ignored, children inherit that, and Python then
    # keeps ignoring it (as a command started so must)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted(args, after: float):
    proc = subprocess.Popen([*WORKLOADMAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_as_from_a_terminal)
    time.sleep(after)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    start = time.monotonic()
    _, err = proc.communicate(timeout=20)
    return proc.returncode, err, time.monotonic() - start


def test_ctrl_c_in_a_long_query_exits_130_at_once(demo_warehouse):
    # a cross join of 9e10 rows: minutes of DuckDB work, in C
    code, err, took = interrupted(["query", "--duckdb", str(demo_warehouse),
                                   "SELECT sum(a.range * b.range) FROM range(300000) a, range(300000) b"], after=4)
    assert code == 130 and one_line(err) == "interrupted" and took < 5


def test_ctrl_c_in_capacity_exits_130_at_once(demo_warehouse):
    # ~49,000 hourly steps by four dimensions: tens of seconds in DuckDB
    code, err, took = interrupted(["capacity", "--duckdb", str(demo_warehouse), "--since", "2021-04-01",
                                   "--until", "2026-12-01", "--step", "1h",
                                   "--by", "cluster,namespace,framework,kind"], after=5)
    assert code == 130 and one_line(err) == "interrupted" and took < 5


def test_feed_from_the_topic_with_no_broker_is_said_at_once(no_broker):
    code, _, err, took = run("feed", "--bootstrap-servers", no_broker)
    assert code == 1 and took < 15 and one_line(err).startswith(f"error: no Kafka broker at {no_broker}")


def test_demo_refuses_to_mix_its_clusters_into_a_real_history(tmp_path):
    """The demo and the analytics commands share one default file (workloadmap.duckdb): a real
    history there must not receive simulated clusters."""
    from tests.analytics_history import build
    path = tmp_path / "real.duckdb"
    build(path)   # clusters a and b: not the simulator's
    code, _, err, _ = run("demo", "--duckdb", str(path), "--workloads", "5", "--days", "1")
    assert code == 1
    assert one_line(err) == f"error: {path} holds clusters the demo does not simulate (a, b): give the demo another --duckdb"


@pytest.mark.parametrize("args, message", [
    (["cost", "--since", "99999999999d"], "'99999999999d' is further back than time goes"),
    (["capacity", "--since", "2026-11-01", "--step", "99999999999d"], "'99999999999d' is too long a step"),
])
def test_times_past_what_python_counts_are_usage_errors(demo_warehouse, args, message):
    code, _, err, _ = run(*args, "--duckdb", str(demo_warehouse))
    assert code == 2 and "Traceback" not in err and err.strip().splitlines()[-1].endswith(message), err
