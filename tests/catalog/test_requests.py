"""Quantities, effective pod requests, and resolving objects through small definitions.

Quantities follow apimachinery's grammar; pod requests follow the scheduler
(requests default to limits, init and sidecar containers, overhead); the
Resolver turns a definition's paths into pods per component and per-pod
requests, aligns instance values, names the object and field in its errors,
and maps framework status onto the shared vocabulary by precedence.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from workloadmap.catalog.definitions import STATUS_PRECEDENCE
from workloadmap.catalog.quantities import QuantityError, parse_quantity
from workloadmap.catalog.requests import GpuMatcher, RequestError, effective_request
from workloadmap.catalog.resolving import ResolveError, Resolver, resolve
from workloadmap.catalog.validating import load_definition

Gi = 2**30
Mi = 2**20


# -- quantities -------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("500m", Fraction(1, 2)),
    ("64Gi", 64 * Gi),
    ("1e3", 1000),
    ("1.5", Fraction(3, 2)),
    ("2k", 2000),
    ("100M", 100 * 10**6),
    ("0.5Gi", Gi // 2),
    (".5", Fraction(1, 2)),
    ("+1", 1),
    ("1E-2", Fraction(1, 100)),
    ("8", 8),
    ("256Mi", 256 * Mi),
    ("1Ki", 1024),
    ("3G", 3 * 10**9),
    ("250u", Fraction(250, 10**6)),
    ("0", 0),
    (4, 4),
    (0, 0),
    (2.5, Fraction(5, 2)),
    (0.25, Fraction(1, 4)),
])
def test_quantity_grammar(text, expected):
    value = parse_quantity(text)
    assert isinstance(value, Fraction)
    assert value == expected


@pytest.mark.parametrize("value", ["abc", "1.2.3", "5 Gi", "", True, False, None, "1e99999", "Gi", "1Gb",
                                   "1ki", "--1", float("nan"), float("inf"), [1], {"a": 1}, "1" * 65])
def test_invalid_quantity_is_rejected(value):
    with pytest.raises(QuantityError):
        parse_quantity(value)


# -- effective pod requests ----------------------------------------------------------

def container(name="c", requests=None, limits=None, **extra):
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "img", "resources": resources, **extra}


def sidecar(name="side", **kw):
    return container(name, restartPolicy="Always", **kw)


def test_requests_default_to_limits_per_resource():
    spec = {"containers": [container(requests={"cpu": "1"}, limits={"cpu": "2", "memory": "1Gi"})]}
    r = effective_request(spec)
    assert r.cpu == 1          # the request wins where it is given
    assert r.memory == Gi      # the limit stands in where no request is given


def test_limits_only_container_requests_its_limits():
    r = effective_request({"containers": [container(limits={"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 2})]})
    assert (r.cpu, r.memory, r.gpu) == (4, 8 * Gi, 2)


def test_container_without_resources_requests_nothing():
    r = effective_request({"containers": [{"name": "c"}, container(requests={})]})
    assert (r.cpu, r.memory, r.gpu) == (0, 0, 0)
    assert (effective_request(None).cpu, effective_request({}).memory) == (0, 0)


def test_requests_sum_over_containers():
    spec = {"containers": [container("a", requests={"cpu": "500m", "memory": "1Gi"}),
                           container("b", requests={"cpu": "1500m", "memory": "512Mi"}),
                           container("c", limits={"cpu": "1"})]}
    r = effective_request(spec)
    assert r.cpu == 3
    assert r.memory == Gi + 512 * Mi


def test_largest_init_container_wins_per_resource():
    spec = {"containers": [container("a", requests={"cpu": "1", "memory": "2Gi"}),
                           container("b", requests={"cpu": "1", "memory": "2Gi"})],
            "initContainers": [container("i1", requests={"cpu": "3", "memory": "1Gi"}),
                               container("i2", requests={"cpu": "5", "memory": "512Mi"})]}
    r = effective_request(spec)
    assert r.cpu == 5              # max(1+1, 3, 5)
    assert r.memory == 4 * Gi      # max(2+2, 1, 0.5): the sum of containers wins for memory


def test_init_containers_below_the_sum_do_not_count():
    spec = {"containers": [container(requests={"cpu": "4"})],
            "initContainers": [container("i", requests={"cpu": "2"})]}
    assert effective_request(spec).cpu == 4


def test_sidecar_init_containers_add_to_the_sum():
    spec = {"containers": [container(requests={"cpu": "1", "memory": "1Gi"})],
            "initContainers": [sidecar(requests={"cpu": "500m", "memory": "256Mi"})]}
    r = effective_request(spec)
    assert r.cpu == 1.5
    assert r.memory == Gi + 256 * Mi


def test_sidecars_add_to_later_init_containers_only():
    spec = {"containers": [container(requests={"cpu": "1"})],
            "initContainers": [container("before", requests={"cpu": "2500m"}),
                               sidecar(requests={"cpu": "1"}),
                               container("after", requests={"cpu": "2"})]}
    # sum = 1 + 1 (sidecar) = 2; init peaks: 2.5 (no sidecar yet), 1, 2 + 1 = 3
    assert effective_request(spec).cpu == 3
    spec["initContainers"][2]["resources"]["requests"]["cpu"] = "1"
    # now peaks 2.5, 1, 2: the init container before the sidecar wins alone
    assert effective_request(spec).cpu == 2.5


def test_several_sidecars_accumulate():
    spec = {"containers": [container(requests={"cpu": "1"})],
            "initContainers": [sidecar("s1", requests={"cpu": "1"}), sidecar("s2", requests={"cpu": "1"}),
                               container("late", requests={"cpu": "3"})]}
    # sum = 1 + 1 + 1 = 3; last init peak = 3 + 2 sidecars = 5
    assert effective_request(spec).cpu == 5


def test_init_container_with_other_restart_policy_is_not_a_sidecar():
    spec = {"containers": [container(requests={"cpu": "1"})],
            "initContainers": [container("i", requests={"cpu": "500m"}, restartPolicy="OnFailure")]}
    assert effective_request(spec).cpu == 1


def test_pod_overhead_is_added():
    spec = {"containers": [container(requests={"cpu": "1", "memory": "1Gi"})],
            "initContainers": [container("i", requests={"cpu": "2"})],
            "overhead": {"cpu": "250m", "memory": "120Mi"}}
    r = effective_request(spec)
    assert r.cpu == 2.25              # max(1, 2) + 0.25
    assert r.memory == Gi + 120 * Mi


def test_pod_level_requests_replace_the_containers_sum():
    # KEP-2837 (spec.resources): pod-level CPU and memory requests win; GPUs stay per container
    spec = {"resources": {"requests": {"cpu": "8", "memory": "32Gi"}, "limits": {"cpu": "8", "memory": "32Gi"}},
            "containers": [container(requests={"cpu": "1", "nvidia.com/gpu": "1"}), container("b")],
            "overhead": {"cpu": "250m"}}
    r = effective_request(spec)
    assert (r.cpu, r.memory, r.gpu) == (8.25, 32 * Gi, 1)


def test_pod_level_limit_stands_in_for_a_request_no_container_makes():
    spec = {"resources": {"limits": {"cpu": "16", "memory": "64Gi"}},
            "containers": [container(requests={"memory": "1Gi"}), container("b")]}
    r = effective_request(spec)
    assert (r.cpu, r.memory) == (16, Gi)   # memory is requested by a container: its sum stands


def test_bad_pod_level_quantity_names_the_field():
    with pytest.raises(RequestError, match=r"spec\.resources\.requests\[cpu\]"):
        effective_request({"resources": {"requests": {"cpu": "lots"}}, "containers": [container()]})


def test_gpu_resource_names_counted_by_default():
    spec = {"containers": [
        container("a", requests={"nvidia.com/gpu": "2"}),
        container("b", limits={"nvidia.com/mig-1g.10gb": "1"}),
        container("c", requests={"amd.com/gpu": 1, "example.com/foo": "5", "ephemeral-storage": "10Gi"}),
    ]}
    r = effective_request(spec)
    assert r.gpu == 4
    assert r.gpus == {"nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 1, "amd.com/gpu": 1}
    assert r.to_dict()["gpuResources"] == {"amd.com/gpu": 1, "nvidia.com/gpu": 2, "nvidia.com/mig-1g.10gb": 1}


def test_no_gpus_means_no_gpu_breakdown():
    r = effective_request({"containers": [container(requests={"cpu": "1", "example.com/foo": 3})]})
    assert r.gpu == 0 and r.gpus == {}
    assert "gpuResources" not in r.to_dict()


def test_custom_gpu_patterns():
    spec = {"containers": [container(requests={"nvidia.com/gpu": "2", "example.com/foo": "5",
                                               "example.com/bar": "1", "habana.ai/gaudi": "8"})]}
    matcher = GpuMatcher(["example.com/*", "habana.ai/gaudi"])
    r = effective_request(spec, matcher)
    assert r.gpu == 14
    assert set(r.gpus) == {"example.com/foo", "example.com/bar", "habana.ai/gaudi"}
    assert matcher("example.com/foo") and not matcher("nvidia.com/gpu")


def test_gpus_scale_with_pods():
    r = effective_request({"containers": [container(requests={"nvidia.com/gpu": "8", "cpu": "500m"})]})
    total = r.scaled(3)
    assert (total.gpu, total.cpu, total.gpus) == (24, 1.5, {"nvidia.com/gpu": 24})


def test_bad_quantity_names_container_index_and_resource():
    spec = {"containers": [container("a", requests={"cpu": "1"}),
                           container("b", requests={"cpu": "1", "memory": "lots"})]}
    with pytest.raises(RequestError) as info:
        effective_request(spec)
    message = str(info.value)
    assert "containers[1]" in message
    assert "memory" in message
    assert "'lots'" in message


def test_bad_quantity_in_init_container_and_limits():
    spec = {"containers": [container()],
            "initContainers": [container("i", limits={"nvidia.com/gpu": "two"})]}
    with pytest.raises(RequestError, match=r"initContainers\[0\].*nvidia.com/gpu"):
        effective_request(spec)


@pytest.mark.parametrize("spec, field", [
    # the API server accepts "-3" in a custom resource's embedded pod template (issue 27)
    ({"containers": [container(requests={"nvidia.com/gpu": "-3"}, limits={"nvidia.com/gpu": "-3"})]},
     "spec.containers[0].resources.limits[nvidia.com/gpu]"),
    ({"containers": [container(requests={"cpu": "-500m"})]}, "spec.containers[0].resources.requests[cpu]"),
    # a limit stands for the request no container makes
    ({"containers": [container(limits={"memory": "-1Gi"})]}, "spec.containers[0].resources.limits[memory]"),
    ({"containers": [container()], "initContainers": [container("i", requests={"cpu": "-1"})]},
     "spec.initContainers[0].resources.requests[cpu]"),
    ({"containers": [container()], "overhead": {"cpu": "-250m"}}, "spec.overhead[cpu]"),
    ({"containers": [container()], "resources": {"requests": {"memory": "-1"}}}, "spec.resources.requests[memory]"),
])
def test_a_negative_quantity_is_an_error_naming_the_field(spec, field):
    with pytest.raises(RequestError, match="is negative") as info:
        effective_request(spec)
    assert str(info.value).startswith(field + ":"), str(info.value)


def test_zero_is_not_negative():
    assert effective_request({"containers": [container(requests={"nvidia.com/gpu": "0", "cpu": "0"})]}).gpu == 0


def test_malformed_pod_specs_raise_request_error():
    for spec in ("a string", {"containers": "x"}, {"containers": ["x"]},
                 {"containers": [{"resources": "x"}]}, {"containers": [{"resources": {"requests": [1]}}]}):
        with pytest.raises(RequestError):
            effective_request(spec)


# -- the Resolver on small definitions ---------------------------------------------------

def wm(children, *, root_extra=None, status=None, name="demo"):
    """A WorkloadMap document: root `demo` (example.com/v1 Demo) plus `children`."""
    root = {"name": "demo", "kind": {"group": "example.com", "version": "v1", "kind": "Demo"},
            "statusDefinition": status or {"statusMappings": {
                "running": [{"byExpression": {"expression": ".status.ok", "expectedResult": "true"}}]}}}
    root.update(root_extra or {})
    return {"apiVersion": "workloadmap.io/v1alpha1", "kind": "WorkloadMap", "metadata": {"name": name},
            "spec": {"structureDefinition": {"rootComponent": root, "childComponents": children}}}


def child(name, **fields):
    return {"name": name, "ownerRef": "demo", **fields}


def load(doc):
    return load_definition(doc, "file", "test.yaml")


def demo(spec, status=None, name="d1"):
    obj = {"apiVersion": "example.com/v1", "kind": "Demo", "metadata": {"name": name, "namespace": "ns"},
           "spec": spec}
    if status is not None:
        obj["status"] = status
    return obj


def view(resolved, name, instance=None):
    found = [c for c in resolved.components if c.name == name and c.instance == instance]
    assert len(found) == 1, [(c.name, c.instance) for c in resolved.components]
    return found[0]


FRAGMENTED = load(wm([
    child("multi", specDefinition={"fragmentedPodSpecDefinition": {
        "containersPath": ".spec.multi.containers", "schedulerNamePath": ".spec.multi.scheduler",
        "labelsPath": ".spec.multi.labels"}}),
    child("single", specDefinition={"fragmentedPodSpecDefinition": {
        "containerPath": ".spec.single.container", "imagePath": ".spec.single.image"}}),
    child("bare", specDefinition={"fragmentedPodSpecDefinition": {"resourcesPath": ".spec.bare.resources"}}),
    child("imaged", specDefinition={"fragmentedPodSpecDefinition": {
        "resourcesPath": ".spec.imaged.resources", "imagePath": ".spec.imaged.image"}}),
]))


def test_fragmented_spec_gives_per_pod_request():
    obj = demo({
        "multi": {"containers": [container("a", requests={"cpu": "1", "nvidia.com/gpu": 1}),
                                 container("b", limits={"cpu": "2", "memory": "4Gi"})],
                  "scheduler": "kai", "labels": {"team": "x"}},
        "single": {"container": container("only", requests={"cpu": "3", "memory": "1Gi"}), "image": "repo/app:2"},
        "bare": {"resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "512Mi", "amd.com/gpu": 2}}},
        "imaged": {"resources": {"limits": {"cpu": "6"}}, "image": "repo/other:1"},
    })
    resolved = resolve(obj, FRAGMENTED)
    multi = view(resolved, "multi")
    assert (multi.per_pod.cpu, multi.per_pod.memory, multi.per_pod.gpu) == (3, 4 * Gi, 1)
    assert multi.pod_template["spec"]["schedulerName"] == "kai"
    assert multi.pod_template["metadata"] == {"labels": {"team": "x"}}
    single = view(resolved, "single")
    assert (single.per_pod.cpu, single.per_pod.memory) == (3, Gi)
    assert single.pod_template["spec"]["containers"][0]["image"] == "repo/app:2"  # imagePath overrides
    bare = view(resolved, "bare")
    assert (bare.per_pod.cpu, bare.per_pod.memory, bare.per_pod.gpu) == (0.25, 512 * Mi, 2)
    assert len(bare.pod_template["spec"]["containers"]) == 1
    imaged = view(resolved, "imaged")
    assert imaged.per_pod.cpu == 6
    assert imaged.pod_template["spec"]["containers"] == [
        {"name": "main", "resources": {"limits": {"cpu": "6"}}, "image": "repo/other:1"}]
    assert all(v.pods == 1 for v in (multi, single, bare, imaged))
    assert resolved.total.cpu == 3 + 3 + 0.25 + 6
    assert resolved.pods == 4
    # the object is read, never written
    assert "name" not in obj["spec"]["single"]["container"]["resources"]
    assert obj["spec"]["single"]["image"] == "repo/app:2"
    assert obj["spec"]["single"]["container"]["image"] == "img"


def test_fragmented_spec_with_nothing_present_has_no_pods():
    resolved = resolve(demo({}), FRAGMENTED)
    for name in ("multi", "single", "bare", "imaged"):
        v = view(resolved, name)
        assert v.pod_template is None and v.pods == 0
    assert resolved.pods == 0


SCALED = load(wm([
    child("workers", specDefinition={"podTemplateSpecPath": ".spec.template"},
          scaleDefinition={"replicasPath": ".spec.replicas", "minReplicasPath": ".spec.min",
                           "maxReplicasPath": ".spec.max", "podsPerReplicaPath": ".spec.perReplica"}),
    child("group", scaleDefinition={"replicasPath": ".spec.replicas"}),
]))
TEMPLATE = {"spec": {"containers": [container(requests={"cpu": "2", "nvidia.com/gpu": "1"})]}}


def test_pods_are_replicas_times_pods_per_replica():
    resolved = resolve(demo({"template": TEMPLATE, "replicas": 3, "perReplica": 4, "min": 1, "max": 5}), SCALED)
    v = view(resolved, "workers")
    assert (v.replicas, v.min_replicas, v.max_replicas, v.pods_per_replica, v.pods) == (3, 1, 5, 4, 12)
    assert (v.total.cpu, v.total.gpu) == (24, 12)
    assert resolved.pods == 12 and resolved.total.gpu == 12


def test_pods_from_min_replicas_when_replicas_absent():
    v = view(resolve(demo({"template": TEMPLATE, "min": 2, "max": 6, "perReplica": 2}), SCALED), "workers")
    assert v.replicas is None
    assert v.pods == 4


def test_one_replica_when_neither_replicas_nor_min():
    v = view(resolve(demo({"template": TEMPLATE}), SCALED), "workers")
    assert (v.replicas, v.min_replicas, v.pods_per_replica, v.pods) == (None, None, 1, 1)
    assert v.per_pod.cpu == 2


def test_replicas_zero_means_zero_pods():
    v = view(resolve(demo({"template": TEMPLATE, "replicas": 0, "min": 2}), SCALED), "workers")
    assert v.pods == 0


def test_string_counts_are_read_as_integers():
    v = view(resolve(demo({"template": TEMPLATE, "replicas": "3"}), SCALED), "workers")
    assert (v.replicas, v.pods) == (3, 3)


def test_counts_span_the_int32_range():
    v = view(resolve(demo({"template": TEMPLATE, "replicas": 2**31 - 1}), SCALED), "workers")
    assert v.replicas == 2**31 - 1


# -1 is no error: an autoscaler owns the count (test_controller_states: replicas_minus_one)
@pytest.mark.parametrize("bad", [-2, 2**31, "many", True, {"n": 1}])
def test_bad_counts_are_errors(bad):
    with pytest.raises(ResolveError) as info:
        resolve(demo({"template": TEMPLATE, "replicas": bad}), SCALED)
    assert info.value.field == "spec.structureDefinition.childComponents[0].scaleDefinition.replicasPath"


def test_component_without_spec_definition_has_no_pods():
    resolved = resolve(demo({"template": TEMPLATE, "replicas": 3}), SCALED)
    group = view(resolved, "group")
    assert group.replicas == 3
    assert group.pods == 0
    assert group.pod_template is None
    assert view(resolved, "demo").pods == 0
    assert resolved.pods == 3


INSTANCES = load(wm([
    child("pool", instanceIdPath=".spec.pools[].name",
          podSelector={"componentInstanceSelector": {"idPath": '.metadata.labels["pool"]'}},
          specDefinition={"podTemplateSpecPath": ".spec.template"},                 # 1 output, shared
          scaleDefinition={"replicasPath": ".spec.pools[].replicas",                # N outputs, aligned
                           "minReplicasPath": ".spec.pools[] | .min // empty",      # 0 outputs -> null
                           "maxReplicasPath": ".spec.limits[]?"}),                  # mismatch when 2 of 3
]))


def test_instance_values_align_share_or_are_null():
    obj = demo({"template": TEMPLATE,
                "pools": [{"name": "a", "replicas": 1}, {"name": "b", "replicas": 2}, {"name": "c", "replicas": 3}]})
    resolved = resolve(obj, INSTANCES)
    pools = [c for c in resolved.components if c.name == "pool"]
    assert [(c.instance, c.replicas, c.min_replicas, c.pods) for c in pools] == [
        ("a", 1, None, 1), ("b", 2, None, 2), ("c", 3, None, 3)]
    assert all(c.per_pod.cpu == 2 for c in pools)
    assert resolved.pods == 6


def test_instance_values_all_present_align_by_order():
    obj = demo({"template": TEMPLATE, "limits": [7, 8],
                "pools": [{"name": "a", "replicas": 1, "min": 1}, {"name": "b", "replicas": 2, "min": 0}]})
    pools = [c for c in resolve(obj, INSTANCES).components if c.name == "pool"]
    assert [(c.instance, c.min_replicas, c.max_replicas) for c in pools] == [("a", 1, 7), ("b", 0, 8)]


def test_single_output_is_shared_by_every_instance():
    obj = demo({"template": TEMPLATE, "limits": [9],
                "pools": [{"name": "a", "replicas": 1}, {"name": "b", "replicas": 2}, {"name": "c", "replicas": 3}]})
    pools = [c for c in resolve(obj, INSTANCES).components if c.name == "pool"]
    assert [c.max_replicas for c in pools] == [9, 9, 9]


def test_mismatched_instance_counts_name_the_field():
    obj = demo({"template": TEMPLATE, "limits": [4, 5],
                "pools": [{"name": "a", "replicas": 1}, {"name": "b", "replicas": 2}, {"name": "c", "replicas": 3}]})
    with pytest.raises(ResolveError) as info:
        resolve(obj, INSTANCES)
    err = info.value
    assert err.field == "spec.structureDefinition.childComponents[0].scaleDefinition.maxReplicasPath"
    assert "instance ids count (3) does not match results count (2)" in err.reason
    assert err.definition == "demo" and err.object == "Demo ns/d1"


def test_no_instances_means_no_views():
    resolved = resolve(demo({"template": TEMPLATE, "pools": []}), INSTANCES)
    assert [c.name for c in resolved.components] == ["demo"]
    assert resolved.pods == 0


def test_numeric_instance_ids_become_strings():
    obj = demo({"template": TEMPLATE, "pools": [{"name": 0, "replicas": 1}, {"name": 1, "replicas": 1}]})
    assert [c.instance for c in resolve(obj, INSTANCES).components if c.name == "pool"] == ["0", "1"]


def test_resolve_error_names_definition_field_and_object():
    with pytest.raises(ResolveError) as info:
        resolve(demo("not-an-object", name="broken"), SCALED)
    err = info.value
    assert err.definition == "demo"
    assert err.field == "spec.structureDefinition.childComponents[0].specDefinition.podTemplateSpecPath"
    assert err.object == "Demo ns/broken"
    message = str(err)
    assert message.startswith("Demo ns/broken: definition 'demo': spec.structureDefinition.childComponents[0]")
    assert "'.spec.template' failed" in message


def test_resolve_error_on_replicas_of_a_string_spec():
    d = load(wm([child("w", scaleDefinition={"replicasPath": ".spec.replicas"})]))
    with pytest.raises(ResolveError) as info:
        resolve(demo("oops", name="w1"), d)
    message = str(info.value)
    assert "Demo ns/w1" in message
    assert "'demo'" in message
    assert "spec.structureDefinition.childComponents[0].scaleDefinition.replicasPath" in message
    assert "'.spec.replicas' failed" in message


def test_request_error_becomes_resolve_error_naming_the_spec():
    obj = demo({"template": {"spec": {"containers": [container(requests={"cpu": "x"})]}}})
    with pytest.raises(ResolveError) as info:
        resolve(obj, SCALED)
    assert info.value.field == "spec.structureDefinition.childComponents[0].specDefinition"
    assert "containers[0]" in info.value.reason and "cpu" in info.value.reason


def test_a_negative_request_is_a_resolve_error_naming_the_spec():
    obj = demo({"replicas": 2, "template": {"spec": {"containers": [container(requests={"nvidia.com/gpu": "-3"})]}}})
    with pytest.raises(ResolveError) as info:
        resolve(obj, SCALED)
    assert info.value.field == "spec.structureDefinition.childComponents[0].specDefinition"
    assert "containers[0].resources.requests[nvidia.com/gpu]: '-3' is negative" in info.value.reason


@pytest.mark.parametrize("spec, field, pods", [
    # each count is within int32; their product is not: 2 x (2^31-1)
    ({"replicas": 2, "perReplica": 2**31 - 1, "template": TEMPLATE}, "podsPerReplicaPath", 2 * (2**31 - 1)),
    ({"replicas": 2**31 - 1, "perReplica": 2**31 - 1, "template": TEMPLATE}, "podsPerReplicaPath", (2**31 - 1) ** 2),
])
def test_replicas_times_pods_per_replica_past_int32_is_a_resolve_error_naming_the_field(spec, field, pods):
    with pytest.raises(ResolveError) as info:
        resolve(demo(spec), SCALED)
    assert info.value.field == f"spec.structureDefinition.childComponents[0].scaleDefinition.{field}"
    assert f"= {pods} pods, more than 2147483647" in info.value.reason


def test_components_whose_pods_add_up_past_int32_are_a_resolve_error():
    two = load(wm([child(n, specDefinition={"podTemplateSpecPath": ".spec.template"},
                         scaleDefinition={"replicasPath": f".spec.{n}"}) for n in ("a", "b")]))
    spec = {"a": 2**31 - 1, "b": 1, "template": TEMPLATE}   # each in range, 2^31 together
    with pytest.raises(ResolveError, match="pods add up to 2147483648, more than 2147483647"):
        resolve(demo(spec), two)
    # the generated code (the pipeline's resolver) refuses it too, through the reference
    with pytest.raises(ResolveError, match="pods add up to 2147483648"):
        Resolver().resolve(demo(spec), two)
    assert resolve(demo({**spec, "a": 2**31 - 2}), two).pods == 2**31 - 1


def test_custom_gpu_matcher_in_the_resolver():
    obj = demo({"template": {"spec": {"containers": [container(requests={"example.com/tpu": "4",
                                                                        "nvidia.com/gpu": "1"})]}}})
    assert view(resolve(obj, SCALED), "workers").per_pod.gpu == 1
    custom = Resolver(GpuMatcher(["example.com/tpu"]))
    assert view(custom.resolve(obj, SCALED), "workers").per_pod.gpu == 4


# -- status ------------------------------------------------------------------------

ALL_FLAGS = load(wm([], status={"statusMappings": {
    key: [{"byExpression": {"expression": f".status.{key} == true", "expectedResult": "true"}}]
    for key, _ in STATUS_PRECEDENCE}}))


def flags(*keys):
    return demo({}, status={k: True for k in keys})


def test_status_precedence_order():
    assert [s for _, s in STATUS_PRECEDENCE] == ["Failed", "Completed", "Suspended", "Suspending", "Resuming",
                                                  "Degraded", "Running", "Initializing"]


@pytest.mark.parametrize("index", range(len(STATUS_PRECEDENCE)))
def test_highest_precedence_status_wins(index):
    keys = [k for k, _ in STATUS_PRECEDENCE]
    # this status and every lower one match: this one is resolved
    resolved = resolve(flags(*keys[index:]), ALL_FLAGS)
    assert resolved.status == STATUS_PRECEDENCE[index][1]
    assert resolved.statuses == [s for _, s in STATUS_PRECEDENCE[index:]]
    # alone, it is resolved too
    assert resolve(flags(keys[index]), ALL_FLAGS).status == STATUS_PRECEDENCE[index][1]


def test_failed_beats_everything_and_running_beats_initializing():
    assert resolve(flags("running", "failed", "completed"), ALL_FLAGS).status == "Failed"
    assert resolve(flags("initializing", "running"), ALL_FLAGS).status == "Running"
    assert resolve(flags("running", "degraded"), ALL_FLAGS).status == "Degraded"
    assert resolve(flags("suspending", "resuming"), ALL_FLAGS).status == "Suspending"


def test_undefined_when_nothing_matches():
    resolved = resolve(flags(), ALL_FLAGS)
    assert resolved.status == "Undefined"
    assert resolved.statuses == []


COND = load(wm([], status={
    "conditionsDefinition": {"path": ".status.conditions"},
    "phaseDefinition": {"path": ".status.phase"},
    "statusMappings": {
        "failed": [{"byConditions": [{"type": "Failed", "status": "True"}]}],
        "degraded": [{"byConditions": [{"type": "Ready", "status": "False"}]}],
        "running": [
            {"byPhase": "Running", "byConditions": [{"type": "Ready", "status": "True"}]},
            {"byConditions": [{"type": "Serving", "reason": "Up"}]},
        ],
        "initializing": [{"byPhase": "Pending"}],
    }}))


def cond_obj(phase=None, *conditions):
    status = {"conditions": [dict(zip(("type", "status", "reason"), c)) for c in conditions]}
    if phase is not None:
        status["phase"] = phase
    return demo({}, status=status)


def test_by_conditions_requires_the_condition_to_exist():
    # degraded wants Ready=False: an absent Ready condition is not "False"
    assert resolve(cond_obj(None), COND).status == "Undefined"
    assert resolve(cond_obj(None, ("Other", "False", "x")), COND).status == "Undefined"
    assert resolve(cond_obj(None, ("Ready", "False", "x")), COND).status == "Degraded"


def test_matcher_parts_are_anded():
    assert resolve(cond_obj("Running"), COND).status == "Undefined"                        # phase only
    assert resolve(cond_obj("Starting", ("Ready", "True", "x")), COND).status == "Undefined"  # condition only
    assert resolve(cond_obj("Running", ("Ready", "True", "x")), COND).status == "Running"


def test_matchers_are_ored():
    # the second running matcher alone: Serving with reason Up (status not checked)
    assert resolve(cond_obj(None, ("Serving", "False", "Up")), COND).status == "Running"
    assert resolve(cond_obj(None, ("Serving", "True", "Down")), COND).status == "Undefined"
    assert resolve(cond_obj("Pending"), COND).status == "Initializing"


def test_boolean_condition_status_reads_as_true_false():
    obj = demo({}, status={"conditions": [{"type": "Failed", "status": True}]})
    resolved = resolve(obj, COND)
    assert resolved.status == "Failed"
    assert resolved.conditions[0]["status"] == "True"


def test_conditions_are_normalised():
    resolved = resolve(cond_obj("Running", ("Ready", "True", "AllGood")), COND)
    assert resolved.phase == "Running"
    assert resolved.conditions == [{"type": "Ready", "status": "True", "reason": "AllGood", "message": None}]


def test_custom_condition_field_names():
    d = load(wm([], status={
        "conditionsDefinition": {"path": ".status.conds", "typeFieldName": "kind", "statusFieldName": "state",
                                 "reasonFieldName": "why", "messageFieldName": "msg"},
        "statusMappings": {"failed": [{"byConditions": [{"type": "Broken", "status": "yes", "reason": "Disk"}]}]}}))
    obj = demo({}, status={"conds": [{"kind": "Broken", "state": "yes", "why": "Disk", "msg": "full"}]})
    resolved = resolve(obj, d)
    assert resolved.status == "Failed"
    assert resolved.conditions == [{"type": "Broken", "status": "yes", "reason": "Disk", "message": "full"}]


def expression_def(expression, expected):
    return load(wm([], status={"statusMappings": {
        "running": [{"byExpression": {"expression": expression, "expectedResult": expected}}]}}))


@pytest.mark.parametrize("value, expected, matches", [
    ("hello", "hello", True),          # strings compare raw
    ("hello", '"hello"', False),       # ... not as JSON text
    (True, "true", True),              # booleans as true/false
    (False, "false", True),
    (True, "True", False),
    (3, "3", True),                    # numbers as JSON text
    (1.5, "1.5", True),
    (None, "null", True),
    ({"a": 1}, '{"a":1}', True),
    ([1, 2], "[1,2]", True),
])
def test_by_expression_compares_stringified_first_output(value, expected, matches):
    d = expression_def(".status.value", expected)
    resolved = resolve(demo({}, status={"value": value}), d)
    assert resolved.status == ("Running" if matches else "Undefined")


def test_by_expression_uses_the_first_output_only():
    obj = demo({}, status={"list": ["a", "b"]})
    assert resolve(obj, expression_def(".status.list[]", "a")).status == "Running"
    assert resolve(obj, expression_def(".status.list[]", "b")).status == "Undefined"


def test_by_expression_without_output_does_not_match():
    assert resolve(demo({}, status={"list": []}), expression_def(".status.list[]", "null")).status == "Undefined"
