"""How one object's lines are written: the label and number texts of the text exposition format.

The shortcuts the tracker takes for the common case (a workload's four labels, a component without an
instance, numbers it has written before) must write exactly what the general writers write; the
expectations are the text format's rules (label values escape backslash, double quote and newline; an
empty value is no label) applied by hand.
"""

from __future__ import annotations

import pytest

from workloadmap.exporter.families import component_labels, labels, number, resource_lines, workload_labels


@pytest.mark.parametrize(("cluster", "namespace", "workload", "kind", "expected"), [
    ("c1", "ml", "train", "PyTorchJob", 'cluster="c1",namespace="ml",workload="train",kind="PyTorchJob"'),
    ("c1", None, "node-agent", "DaemonSet", 'cluster="c1",workload="node-agent",kind="DaemonSet"'),
    ("c1", "", "w", "Job", 'cluster="c1",workload="w",kind="Job"'),
    ("c1", 'n"s', "a\\b", "K\nind", 'cluster="c1",namespace="n\\"s",workload="a\\\\b",kind="K\\nind"'),
    ("c1", "ns-ü", "ñ", "Job", 'cluster="c1",namespace="ns-ü",workload="ñ",kind="Job"'),
])
def test_a_workloads_label_prefix_is_the_general_writers_text(cluster, namespace, workload, kind, expected):
    assert workload_labels(cluster, namespace, workload, kind) == expected
    assert labels(cluster=cluster, namespace=namespace, workload=workload, kind=kind) == expected


@pytest.mark.parametrize(("component", "instance", "expected"), [
    ("worker", None, 'cluster="c1",component="worker"'),
    ("worker", "small", 'cluster="c1",component="worker",component_instance="small"'),
    ('w"1', None, 'cluster="c1",component="w\\"1"'),
    ("", None, 'cluster="c1"'),
])
def test_a_components_labels_are_the_general_writers_text(component, instance, expected):
    assert component_labels('cluster="c1"', component, instance) == expected
    assert labels('cluster="c1"', component=component, component_instance=instance) == expected


def test_numbers_keep_their_text_whichever_of_equal_values_came_first():
    # 8 and 8.0 are one number in the format; past 2^53 an int is exact and a float is its repr
    assert [number(8.0), number(8), number(0.5), number(-0.0), number(0)] == ["8", "8", "0.5", "0", "0"]
    assert number(2**60) == "1152921504606846976"
    assert number(2.0**60) == "1.152921504606847e+18"
    assert number(2**60) == "1152921504606846976"


def test_resource_lines_are_cpu_memory_then_each_gpu_resource_by_name():
    text = resource_lines("f", 'a="1"', 0.25, 2**30, {"nvidia.com/mig-1g.5gb": 2, "amd.com/gpu": 1.0})
    assert text == ('f{a="1",resource="cpu",unit="core"} 0.25\n'
                    'f{a="1",resource="memory",unit="byte"} 1073741824\n'
                    'f{a="1",resource="amd_com_gpu",unit="integer"} 1\n'
                    'f{a="1",resource="nvidia_com_mig_1g_5gb",unit="integer"} 2\n')
    assert resource_lines("f", "", None, None, None) == ('f{resource="cpu",unit="core"} 0\n'
                                                         'f{resource="memory",unit="byte"} 0\n')
