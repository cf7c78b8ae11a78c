"""The embedded pipeline as a library (workloadmap.embedding), and the README's example of it, run as written."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

from workloadmap.embedding import EmbeddedPipeline
from workloadmap.ingest.publishing import write_jsonl
from workloadmap.ingest.simulating import simulate, simulate_messages
from workloadmap.warehouse.querying import open_readonly, run_query
from workloadmap.warehouse.writing import Warehouse

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- embedded-example: tests/e2e/test_embedding.py runs this block -->"


def readme_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert MARKER in text, "the README's embedded example lost its marker"
    block = re.match(r"\s*```python\n(.*?)\n```", text.split(MARKER, 1)[1], re.DOTALL)
    assert block, "the marker must be followed by a ```python block"
    return block.group(1)


def test_the_readme_example_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    scope: dict = {"__name__": "readme_example"}
    with contextlib.redirect_stdout(out):
        exec(compile(readme_example(), "README.md (embedded example)", "exec"), scope)
    counts = scope["pipeline"].counts
    assert counts["events"] == counts["records"] + counts["dead_letters"] and counts["dead_letters"] > 0
    lines = out.getvalue().splitlines()
    assert lines[0] == str(counts)
    # the warehouse is closed with the pipeline, so it opens read-only with what the example wrote
    conn = open_readonly(tmp_path / "history.duckdb")
    try:
        assert conn.execute("SELECT count(*) FROM workload_states").fetchone()[0] == counts["records"]
        clusters = [r["cluster"] for r in run_query(conn, "demand_by_cluster").dicts()]
    finally:
        conn.close()
    assert [line.split()[0] for line in lines[2:]] == clusters and len(clusters) == 2


def test_every_form_of_message_gives_the_same_warehouse(tmp_path):
    """Dicts, JSON lines (str and bytes), (key, value) tuples and a file: the same records."""
    events = [e.event for e in simulate(clusters=1, workloads=8, days=0.5, seed=3)]
    path = tmp_path / "events.jsonl"
    write_jsonl(events, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    forms = {
        "dicts": lambda p: p.feed(events),
        "str lines": lambda p: p.feed(lines),
        "bytes lines": lambda p: p.feed(line.encode() for line in lines),
        "tuples": lambda p: p.feed(simulate_messages(clusters=1, workloads=8, days=0.5, seed=3)),
        "file": lambda p: p.feed_file(path),
    }
    seen = {}
    for name, feed in forms.items():
        with EmbeddedPipeline.open(tmp_path / f"{name}.duckdb", batch=7) as pipeline:
            assert feed(pipeline) == len(events)
            pipeline.flush()
            rows = pipeline.query("demand_by_cluster").rows
            seen[name] = (dict(pipeline.counts), rows)
    first = seen["dicts"]
    assert first[0]["records"] == len(events) and first[0]["dead_letters"] == 0 and first[1]
    assert all(v == first for v in seen.values()), seen


def test_dead_letters_and_a_warehouse_the_caller_keeps(tmp_path):
    with Warehouse(tmp_path / "w.duckdb") as warehouse:
        pipeline = EmbeddedPipeline(warehouse, batch=1000)
        unknown = {"cluster": "a", "type": "ADDED", "observedAt": "2026-11-01T00:00:00Z",
                   "object": {"apiVersion": "example.com/v1", "kind": "Nothing", "metadata": {"name": "x", "uid": "u1"}}}
        pipeline.feed([(b"a/u0", b"{not json"), unknown])
        pipeline.close()
        assert pipeline.counts == {"events": 2, "records": 0, "dead_letters": 2, "transitions": 0, "pods": 0, "nodes": 0}
        assert [d["reason"] for d in pipeline.dead_letters] == ["malformed-json", "unknown-kind"]
        assert json.loads(json.dumps(pipeline.dead_letters)) == pipeline.dead_letters
        # closing the pipeline left the caller's warehouse open
        assert warehouse.cursor().execute("SELECT count(*) FROM workload_states").fetchone() == (0,)


def test_a_trainjob_seen_before_its_runtime_ends_with_the_runtime_s_pods(tmp_path):
    """The raw stream as the watchers may publish it: the TrainJob before the runtime it names. The
    warehouse keeps both facts of its one resourceVersion (without the runtime, then with it), and
    its current state has the runtime's pods."""
    from workloadmap.catalog import records
    from workloadmap.catalog.registry import bundled_related
    from tests.conftest import example_objects

    job = example_objects("trainjob")["llama-finetune"]
    runtime = next(o for o in bundled_related() if o["metadata"]["name"] == "torch-distributed")
    events = [records.raw_event("prod", "ADDED", job, "2026-11-01T00:00:00.000Z"),
              records.raw_event("prod", "ADDED", runtime, "2026-11-01T00:00:05.000Z")]
    with Warehouse(tmp_path / "w.duckdb") as warehouse:
        pipeline = EmbeddedPipeline(warehouse, batch=10)
        pipeline.feed(events)
        pipeline.close()
        rows = warehouse.cursor().execute(
            "SELECT version_key, pods, gpus FROM workload_states WHERE name = 'llama-finetune' "
            "ORDER BY observed_at").fetchall()
    assert rows == [("5120773#0", 0, 0.0), ("5120773#1", 4, 32.0)]
