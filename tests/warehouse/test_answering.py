"""The fresh reads over HTTP (warehouse/answering.py), answered by a writer's thread between batches.

The warehouse is the hand-built history of tests/analytics_history.py; expectations are
derived by hand from its table (the module docstring) and say so.  A thread plays the writer:
it runs what the test hands it (writes) and calls ``ReadServer.answer`` in between, as
``KafkaWarehouseWriter.run`` does after each poll (the run-warehouse path on a real broker is
tests/e2e/test_serving_e2e.py).
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta

import pytest

from tests.analytics_history import DAY, GIB, build, iso
from workloadmap.warehouse import answering
from workloadmap.warehouse.answering import ReadServer, parse_window
from workloadmap.warehouse.writing import Warehouse

NOW = DAY + timedelta(hours=6)


class Writer:
    """The writer's thread: writes handed to it, and the reads answered between them."""

    def __init__(self, path, server: ReadServer, pricing=None):
        self.server, self.todo, self.stop = server, queue.Queue(), threading.Event()
        self.warehouse = Warehouse(path, pricing=pricing)
        self.longest_answer = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.is_set():
            try:
                self.todo.get(timeout=0.02)(self.warehouse)
            except queue.Empty:
                pass
            started = time.monotonic()
            self.server.answer(self.warehouse)
            self.longest_answer = max(self.longest_answer, time.monotonic() - started)
        self.warehouse.close()

    def close(self):
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def served(tmp_path):
    """(base URL, writer) over the hand-built history, no token."""
    path = build(tmp_path / "wh.duckdb")
    server = ReadServer(("127.0.0.1", 0), clock=lambda: NOW)
    writer = Writer(path, server)
    yield f"http://127.0.0.1:{server.port}", writer
    writer.close()
    server.close()


def get(url: str, token: str | None = None) -> tuple[int, object]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_capacity_now_is_the_live_workloads_requests_by_cluster(served):
    base, _ = served
    status, body = get(f"{base}/api/v1/capacity?by=cluster")
    assert status == 200
    items = {i["cluster"]: i for i in body["items"]}
    # a: serve Running 4 GPUs; train Completed still requests 8 (all = every status but Deleted)
    assert (items["a"]["running_gpus"], items["a"]["all_gpus"], items["a"]["workloads"]) == (4, 12, 2)
    # b: big Failed at 32 GPUs (nothing running); infer deleted: left out
    assert (items["b"]["running_gpus"], items["b"]["all_gpus"], items["b"]["workloads"]) == (0, 32, 1)
    assert items["a"]["all_memory_gib"] == 64 + 8


def test_capacity_over_a_window_in_steps(served):
    base, _ = served
    status, body = get(f"{base}/api/v1/capacity?by=cluster&since=2026-11-01T02:00:00Z&until=2026-11-01T04:00:00Z&step=1h")
    assert status == 200
    steps = {(i["cluster"], i["start"]): i for i in body["items"] if "start" in i}
    # a at 02:00-03:00: train Initializing->Running 8 since 01:00, serve Running 4 from 02:00 -> 12
    assert steps[("a", "2026-11-01T02:00:00Z")]["peak_gpus"] == 12
    # b at 03:00-04:00: big 32 Running all hour, infer 2 Running from 03:30 -> peak 34
    assert steps[("b", "2026-11-01T03:00:00Z")]["peak_gpus"] == 34


def test_cost_over_an_opencost_window_aggregated_by_cluster(served):
    base, _ = served
    # the history is workload records alone: billed by what they request (the default basis is allocated)
    status, body = get(f"{base}/api/v1/cost?window=2026-11-01T00:00:00Z,2026-11-01T06:00:00Z&aggregate=cluster"
                       "&basis=requested")
    assert status == 200, body
    hours = {i["cluster"]: i["gpu_hours"] for i in body["items"]}
    # a: train Running 01-05 x 8 = 32, serve Running/Degraded 02-06 x 4 = 16
    # b: infer Running 03:30-06 x 2 = 5, big Running 01:30-02:30 x 16 + 02:30-04:30 x 32 = 80
    assert hours == {"a": 48, "b": 85}
    assert body["currency"] is None and "gpu_cost" not in body["items"][0]   # the writer has no pricing
    assert body["window"] == {"start": "2026-11-01T00:00:00Z", "end": "2026-11-01T06:00:00Z"}
    # unless asked, what the pods held: none here
    status, body = get(f"{base}/api/v1/cost?window=2026-11-01T00:00:00Z,2026-11-01T06:00:00Z&aggregate=cluster")
    assert (status, body["basis"], body["items"]) == (200, "allocated", [])


def test_cost_is_priced_with_the_writers_pricing(tmp_path):
    """The writer's pricing prices the served costs: 2.00 EUR per nvidia.com/gpu-hour, nothing for CPU or
    memory (0), so a's 48 GPU-hours cost 96 and b's 85 cost 170 (the hours of the test above)."""
    from workloadmap.warehouse.pricing import parse_pricing

    path = build(tmp_path / "wh.duckdb")
    server = ReadServer(("127.0.0.1", 0), clock=lambda: NOW)
    writer = Writer(path, server, pricing=parse_pricing({"currency": "EUR", "default": {"gpu": {"nvidia.com/gpu": 2.0}}}))
    try:
        status, body = get(f"http://127.0.0.1:{server.port}/api/v1/cost?window=2026-11-01T00:00:00Z,"
                           "2026-11-01T06:00:00Z&aggregate=cluster&basis=requested")
    finally:
        writer.close()
        server.close()
    assert status == 200 and body["currency"] == "EUR"
    costs = {i["cluster"]: (i["gpu_cost"], i["cpu_cost"], i["memory_cost"], i["total_cost"]) for i in body["items"]}
    assert costs == {"a": (96, 0, 0, 96), "b": (170, 0, 0, 170)}   # no CPU or memory rate: not costed


def test_cost_in_steps_splits_the_window(served):
    base, _ = served
    status, body = get(f"{base}/api/v1/cost?window=2026-11-01T00:00:00Z,2026-11-01T06:00:00Z"
                       "&aggregate=cluster&step=3h&basis=requested")
    assert status == 200, body
    hours = {(i["cluster"], i["start"]): i["gpu_hours"] for i in body["items"]}
    # a 00-03: train 01-03 x 8 = 16, serve 02-03 x 4 = 4; a 03-06: train 03-05 x 8 = 16, serve 3 h x 4 = 12
    assert hours[("a", "2026-11-01T00:00:00Z")] == 20 and hours[("a", "2026-11-01T03:00:00Z")] == 28


def test_a_workload_is_its_latest_record_and_its_history(served):
    base, _ = served
    status, body = get(f"{base}/api/v1/workloads/a/ml/RayService/serve")
    assert status == 200
    assert body["workload"]["status"] == "Running" and body["workload"]["uid"] == "uid-serve"
    assert body["record"]["resourceVersion"] == "6"          # the sixth state of the table
    assert [(h["status"], h["valid_from"], h["valid_to"]) for h in body["history"]] == [
        ("Running", iso(DAY + timedelta(hours=2)), iso(DAY + timedelta(hours=3))),
        ("Degraded", iso(DAY + timedelta(hours=3)), iso(DAY + timedelta(hours=4))),
        ("Running", iso(DAY + timedelta(hours=4)), None)]
    status, body = get(f"{base}/api/v1/workloads/a/ml/RayService/nope")
    assert status == 404 and "RayService/nope" in body["error"]


def test_bad_parameters_are_refused_by_name(served):
    base, _ = served
    for query, named in (("capacity?by=colour", "by"), ("capacity?at=yesterday-ish", "at"),
                         ("cost?window=fortnight", "window"), ("cost?step=7x", "step"),
                         (f"cost?limit={answering.MAX_ROWS + 1}", "limit")):
        status, body = get(f"{base}/api/v1/{query}")
        assert status == 400 and body["error"].startswith(named), (query, body)
    assert get(f"{base}/api/v1/sql?q=drop")[0] == 404


def test_an_answer_larger_than_the_bound_is_refused(served, monkeypatch):
    base, _ = served
    monkeypatch.setattr(answering, "MAX_RESPONSE_BYTES", 200)
    status, body = get(f"{base}/api/v1/workloads/a/ml/RayService/serve")
    assert status == 413 and "narrow" in body["error"]


def test_opencost_windows_relative_to_now():
    assert parse_window("24h", NOW) == (NOW - timedelta(hours=24), NOW)
    assert parse_window("today", NOW) == (DAY, NOW)
    assert parse_window("yesterday", NOW) == (DAY - timedelta(days=1), DAY)
    # 2026-11-01 is a Sunday: the week began on Monday 2026-10-26
    assert parse_window("week", NOW)[0] == DAY - timedelta(days=6)
    # Unix seconds: 2026-11-01T00:00Z is 1,793,491,200 (date -d 2026-11-01Z +%s)
    assert parse_window("1793491200,1793505600", NOW) == (DAY, DAY + timedelta(hours=4))


def test_a_token_is_required_when_set_and_compared_whole(tmp_path):
    path = build(tmp_path / "wh.duckdb")
    server = ReadServer(("127.0.0.1", 0), token="s3cret-token", clock=lambda: NOW)
    writer = Writer(path, server)
    try:
        base = f"http://127.0.0.1:{server.port}/api/v1/capacity"
        assert get(base)[0] == 401
        assert get(base, "s3cret")[0] == 401
        assert get(base, "s3cret-token-and-more")[0] == 401
        assert get(base, "s3cret-token")[0] == 200
    finally:
        writer.close()
        server.close()


def test_reads_wait_for_the_writer_and_a_full_queue_is_refused_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(answering, "MAX_PENDING", 1)
    monkeypatch.setattr(answering, "REPLY_TIMEOUT_S", 2.0)
    server = ReadServer(("127.0.0.1", 0), clock=lambda: NOW)    # no writer answers
    try:
        url = f"http://127.0.0.1:{server.port}/api/v1/capacity"
        first: list = []
        waiting = threading.Thread(target=lambda: first.append(get(url)))
        waiting.start()
        time.sleep(0.5)
        started = time.monotonic()
        status, body = get(url)
        assert status == 503 and time.monotonic() - started < 1.0   # refused, not queued
        waiting.join()
        assert first[0][0] == 504                                    # the writer never came
    finally:
        server.close()


def _events(url: str, count: int, timeout: float = 30.0, pause: float = 0.0) -> list[dict]:
    out = []
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        event: dict = {}
        while len(out) < count:
            line = resp.readline().decode().rstrip("\n")
            if line.startswith("id: "):
                event["id"] = int(line[4:])
            elif line.startswith("data: "):
                event["data"] = json.loads(line[6:])
            elif line == "" and event:
                out.append(event)
                event = {}
                time.sleep(pause)
    return out


def test_the_feed_replays_after_a_row_then_streams_new_transitions(served):
    base, writer = served
    got: list = []
    reader = threading.Thread(target=lambda: got.extend(_events(f"{base}/api/v1/transitions?after=-1", 12)))
    reader.start()
    time.sleep(1.0)
    # a new transition arrives: train deleted at 07:00 (Completed -> Deleted)
    writer.todo.put(lambda wh: wh.write(
        [{"cluster": "a", "uid": "uid-train", "apiVersion": "v1", "kind": "JobSet", "namespace": "ml",
          "name": "train", "definition": "jobset", "framework": "JobSet", "resourceVersion": "13",
          "observedAt": "2026-11-01T07:00:00Z", "eventType": "DELETED", "deleted": True, "status": "Completed",
          "total": {"pods": 1, "gpu": 8, "cpu": 16, "memory": 64 * GIB, "gpuResources": {"nvidia.com/gpu": 8}}}],
        [{"cluster": "a", "namespace": "ml", "name": "train", "kind": "JobSet", "uid": "uid-train",
          "framework": "JobSet", "definition": "jobset", "from": "Completed", "to": "Deleted",
          "at": "2026-11-01T07:00:00Z", "gpus": 0, "previousDurationSeconds": 7200.0}]))
    reader.join(30)
    # the table's 11 transitions in arrival order, then the new one
    assert len(got) == 12
    assert [e["id"] for e in got] == sorted(e["id"] for e in got)
    assert got[0]["data"]["to_status"] == "Initializing" and got[0]["data"]["name"] == "train"
    assert (got[-1]["data"]["name"], got[-1]["data"]["from_status"], got[-1]["data"]["to_status"]) == \
        ("train", "Completed", "Deleted")
    # Last-Event-ID resumes after the one given: only the last
    request = urllib.request.Request(f"{base}/api/v1/transitions", headers={"Last-Event-ID": str(got[-2]["id"])})
    resumed = _events(request.full_url + f"?after={got[-2]['id']}", 1)
    assert resumed[0]["id"] == got[-1]["id"]


def test_a_slow_feed_client_lags_without_losing_events_or_stalling_the_writer(served, monkeypatch):
    base, writer = served
    monkeypatch.setattr(answering, "FEED_QUEUE", 3)          # room for 3 events per client
    got = _events(f"{base}/api/v1/transitions?after=-1", 11, pause=0.3)
    assert len(got) == 11 and len({e["id"] for e in got}) == 11
    assert [e["id"] for e in got] == sorted(e["id"] for e in got)
    # the writer's pauses stayed short while the client read one event every 0.3 s
    assert writer.longest_answer < 0.5


def test_the_dashboard_shows_what_the_api_answers_and_the_feed_as_it_arrives(tmp_path):
    """The page at / in headless Chromium (as tests/warehouse/test_costing.py runs it): the capacity
    cells are the API's numbers, the trend has a point per step, the top workloads are listed, and a
    transition written while the page is open appears in the live feed.  No script errors."""
    import re
    import subprocess

    from tests.warehouse.test_costing import chromium, console_messages

    path = build(tmp_path / "wh.duckdb")
    server = ReadServer(("127.0.0.1", 0), token="dash-token", clock=lambda: NOW)
    writer = Writer(path, server)
    base = f"http://127.0.0.1:{server.port}"
    try:
        status, page = 0, b""
        with urllib.request.urlopen(f"{base}/", timeout=30) as resp:    # no token needed for the page itself
            status, page = resp.status, resp.read().decode()
        assert status == 200 and "<script>" in page
        # self-contained: nothing fetched from elsewhere (the only absolute URL is the SVG namespace)
        assert not re.search(r"""(src|href)\s*=|@import|url\(""", page)
        assert set(re.findall(r"https?://[^\s\"'<>`]+", page)) == {"http://www.w3.org/2000/svg"}
        browser = chromium()
        if browser is None:
            return  # WORKLOADMAP_NO_BROWSER=1: the checks above still ran

        def late_transition():   # once the page's feed is connected, a new transition arrives
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not any(s.started for s in server._subscribers):
                time.sleep(0.1)
            writer.todo.put(lambda wh: wh.write([], [
                {"cluster": "a", "namespace": "ml", "name": "train", "kind": "JobSet", "uid": "uid-train",
                 "framework": "JobSet", "definition": "jobset", "from": "Completed", "to": "Deleted",
                 "at": "2026-11-01T07:00:00Z", "gpus": 0, "previousDurationSeconds": 7200.0}]))
        threading.Thread(target=late_transition, daemon=True).start()
        result = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=8000",
             "--dump-dom", f"{base}/#token=dash-token"], capture_output=True, text=True, timeout=120)
        dom = result.stdout
        assert not [m for m in console_messages(result.stderr) if "Uncaught" in m or "error" in m.lower()], \
            result.stderr[-3000:]
        assert 'id="error"></p>' in dom, dom[:3000]
        # capacity now, as the API answers it (test_capacity_now_is_the_live_workloads_requests_by_cluster)
        api = {i["cluster"]: i for i in get(f"{base}/api/v1/capacity?by=cluster", "dash-token")[1]["items"]}
        for cluster in ("a", "b"):
            row = re.search(rf'<tr data-cluster="{cluster}">(.*?)</tr>', dom).group(1)
            assert f'<td class="running">{api[cluster]["running_gpus"]}</td>' in row
            assert f'<td class="all">{api[cluster]["all_gpus"]}</td>' in row
        # the trend: 24 hourly steps ending at NOW, each the clusters' peaks summed, as the API's series
        series = get(f"{base}/api/v1/capacity?by=cluster&since=2026-10-31T06:00:00Z&until=2026-11-01T06:00:00Z"
                     "&step=1h", "dash-token")[1]["items"]
        summed: dict = {}
        for item in series:
            if "start" in item:
                summed[item["start"]] = summed.get(item["start"], 0) + item["peak_gpus"]
        peaks = [float(p) for p in re.search(r'data-peaks="([^"]*)"', dom).group(1).split(",")]
        assert len(peaks) == 24 and peaks == [summed[k] for k in sorted(summed)]
        # 05:00-06:00 by hand: serve Running 4 + infer Running 2 (train Completed at 05:00, big Failed at 04:30)
        assert peaks[-1] == 4 + 2
        # the top workloads now: serve holds 4 GPUs (Running); the only running workload of the table
        assert '<td class="text workload">RayService/serve</td>' in dom
        # the live feed shows the transition written after the page connected
        feed = dom[dom.find('id="feed"'):]
        assert re.search(r'<tr data-row="\d+">(?:(?!</tr>).)*JobSet/train(?:(?!</tr>).)*<td class="text to">Deleted</td>',
                         feed), feed[:2000]
    finally:
        writer.close()
        server.close()


def test_a_read_past_its_time_bound_is_interrupted_and_the_writer_goes_on(served, monkeypatch):
    base, _ = served
    monkeypatch.setattr(answering, "QUERY_TIMEOUT_S", 0.3)
    started = time.monotonic()
    # a read that would run for minutes, as a library read could on a huge history
    status, body = served[1].server.submit(
        lambda conn: answering._json(200, conn.execute("SELECT count(*) FROM range(100000000000)").fetchall()))
    assert status == 503 and "took more than 0.3 s" in json.loads(body)["error"]
    assert time.monotonic() - started < 10
    assert get(f"{base}/api/v1/capacity?by=cluster")[0] == 200       # the next read is answered
