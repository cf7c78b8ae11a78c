"""Golden tests: every bundled example object resolves as computed by hand.

tests/golden/NAME.yaml lists, per example object of catalog/examples/NAME.yaml,
the resolved status, every (component, instance) with replicas, pods and
per-pod requests, the workload total, and pods with the component / instance
/ replica their labels must map to.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from workloadmap.catalog.pods import match_pod
from workloadmap.catalog.quantities import parse_quantity

from tests.conftest import example_objects

GOLDEN = sorted(Path(__file__).parents[1].joinpath("golden").glob("*.yaml"))
CASES = [
    pytest.param(path.stem, case, id=f"{path.stem}/{case['object']}")
    for path in GOLDEN
    for case in yaml.safe_load(path.read_text())["cases"]
]


def test_every_builtin_definition_has_golden_cases(catalog):
    covered = {p.stem for p in GOLDEN}
    assert {d.name for d in catalog} <= covered
    for path in GOLDEN:
        cases = yaml.safe_load(path.read_text())["cases"]
        assert len(cases) >= 2, f"{path.name}: at least two live objects"


def _q(value):
    return None if value is None else float(parse_quantity(value))


def _check_resources(actual: dict, expected: dict, where: str):
    if "gpu" in expected:
        assert actual["gpu"] == pytest.approx(float(expected["gpu"])), f"{where} gpu"
    if "cpu" in expected:
        assert actual["cpu"] == pytest.approx(_q(expected["cpu"])), f"{where} cpu"
    if "memory" in expected:
        assert actual["memory"] == pytest.approx(_q(expected["memory"])), f"{where} memory"


@pytest.mark.parametrize("name, case", CASES)
def test_golden(catalog, name, case):
    spec = yaml.safe_load(Path(__file__).parents[1].joinpath("golden", f"{name}.yaml").read_text())
    obj = example_objects(name)[case["object"]]
    definition = catalog.definition_for(obj)
    assert definition.name == spec["definition"]
    resolved = catalog.resolve(obj).to_dict()
    assert resolved["status"] == case["status"]
    if "statuses" in case:
        assert resolved["statuses"] == case["statuses"]
    got = {(c["name"], c["instance"]): c for c in resolved["components"]}
    want = {(c["name"], None if c.get("instance") is None else str(c["instance"])): c for c in case["components"]}
    assert set(got) == set(want), "components and instances"
    for key, exp in want.items():
        act = got[key]
        for field in ("replicas", "minReplicas", "maxReplicas", "pods"):
            if field in exp:
                assert act[field] == exp[field], f"{key} {field}"
        if "perPod" in exp:
            _check_resources(act["perPod"], exp["perPod"], f"{key} perPod")
    _check_resources(resolved["total"], case["total"], "total")
    assert resolved["total"]["pods"] == case["total"]["pods"]
    for entry in case.get("pods") or []:
        membership = match_pod(definition, entry["pod"])
        assert membership is not None, f"pod {entry['pod']['metadata']['name']} matched no component"
        assert membership.component == entry["component"]
        assert membership.instance == (None if entry.get("instance") is None else str(entry["instance"]))
        if "replica" in entry:
            assert membership.replica == (None if entry["replica"] is None else str(entry["replica"]))
