"""Bad input to the parsers (extender/model): unknown fields reported, negative and oversized
quantities refused, SubGroup counts limited, values in messages shown as JSON (null, true).
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.model.errors import InvalidObject
from extender.model.flavor import parse_resource_flavor
from extender.model.limits import MAX_SUBGROUPS
from extender.model.node import parse_node
from extender.model.pod import parse_pod
from extender.model.podgroup import parse_podgroup
from extender.model.topology import parse_topology


def podgroup(spec: dict[str, Any], api: str = "scheduling.topogang.io/v1alpha1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": "pg", "namespace": "ml"}, "spec": spec}


def refused(parse: Any, body: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidObject) as caught:
        parse(body)
    return [str(e) for e in caught.value.errors]


# -- unknown fields --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        (
            {"topologyConstraints": {"global": {"requiredTopologyLevl": "rack"}}},
            "PodGroup ml/pg: spec.topologyConstraints.global.requiredTopologyLevl: unknown field;"
            " did you mean requiredTopologyLevel?",
        ),
        ({"minMembers": 2}, "PodGroup ml/pg: spec.minMembers: unknown field; did you mean minMember?"),
        (
            {"subGroups": [{"name": "a", "minMmeber": 1}]},
            "PodGroup ml/pg: spec.subGroups[0].minMmeber: unknown field; did you mean minMember?",
        ),
        (
            {"subGroups": [{"name": "a", "topologyConstraint": {"preferedTopologyLevel": "rack"}}]},
            "PodGroup ml/pg: spec.subGroups[0].topologyConstraint.preferedTopologyLevel: unknown field; did you"
            " mean preferredTopologyLevel?",
        ),
        (
            {"topologyConstraints": {"subgroups": {}}},
            "PodGroup ml/pg: spec.topologyConstraints.subgroups: unknown field; did you mean subGroups?",
        ),
        (
            {
                "subGroups": [{"name": "a"}],
                "topologyConstraints": {"subGroupSets": [{"subGroups": ["a"], "constraints": {}}]},
            },
            "PodGroup ml/pg: spec.topologyConstraints.subGroupSets[0].constraints: unknown field; did you mean"
            " constraint?",
        ),
        # KAI's own fields are not ours: topogang's v1alpha1 refuses them
        ({"preemptibility": "preemptible"}, "PodGroup ml/pg: spec.preemptibility: unknown field (known: "),
    ],
    ids=["constraint-level", "spec", "subgroup", "inline-constraint", "constraints", "set", "kai-field-in-ours"],
)
def test_a_misspelt_podgroup_field_is_an_error_naming_it(spec: dict[str, Any], want: str) -> None:
    errors = refused(parse_podgroup, podgroup(spec))
    assert len(errors) == 1
    assert errors[0].startswith(want)


def test_kai_podgroup_fields_are_known_in_kais_api_version() -> None:
    spec = {"minMember": 1, "preemptibility": "preemptible", "parallelism": 2, "completions": 2, "backoffLimit": 1}
    parse_podgroup(podgroup(spec, api="scheduling.run.ai/v2alpha2"))


def test_a_misspelt_top_level_field_is_an_error() -> None:
    body = {**podgroup({}), "sepc": {"minMember": 3}}
    assert refused(parse_podgroup, body) == ["PodGroup ml/pg: sepc: unknown field; did you mean spec?"]


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        (
            {"levels": [{"nodeLable": "example.com/rack"}]},
            [
                "Topology t: spec.levels[0].nodeLable: unknown field; did you mean nodeLabel?",
                "Topology t: spec.levels[0].nodeLabel: expected a node label name such as example.com/topology-rack",
            ],
        ),
        (
            {"levels": [{"nodeLabel": "example.com/rack"}], "level": []},
            ["Topology t: spec.level: unknown field; did you mean levels?"],
        ),
    ],
    ids=["level", "spec"],
)
def test_a_misspelt_topology_field_is_an_error_naming_it(spec: dict[str, Any], want: list[str]) -> None:
    body = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "t"}, "spec": spec}
    assert refused(parse_topology, body) == want


# -- negative and oversized quantities -----------------------------------------------------------------


def node(status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": status}


@pytest.mark.parametrize(
    ("status", "want"),
    [
        ({"allocatable": {"cpu": "-4"}}, "Node n1: status.allocatable.cpu: expected a quantity >= 0, got '-4'"),
        (
            {"capacity": {"nvidia.com/gpu": -8}},
            "Node n1: status.capacity.nvidia.com/gpu: expected a quantity >= 0, got -8",
        ),
        (
            {"allocatable": {"cpu": "4"}, "capacity": {"cpu": "-1"}},
            "Node n1: status.capacity.cpu: expected a quantity >= 0, got '-1'",
        ),
        (
            {"allocatable": {"memory": "1e999999999"}},
            "Node n1: status.allocatable.memory: '1e999999999' is too large: at most 9,223,372,036,854,775",
        ),
    ],
    ids=["allocatable", "capacity", "capacity-beside-allocatable", "huge-exponent"],
)
def test_negative_or_oversized_node_quantities_are_refused(status: dict[str, Any], want: str) -> None:
    assert refused(parse_node, node(status)) == [want]


@pytest.mark.parametrize(
    ("container", "want"),
    [
        (
            {"name": "c", "resources": {"requests": {"cpu": "-500m"}}},
            "Pod ml/p: spec.containers[0].resources.requests.cpu: expected a quantity >= 0, got '-500m'",
        ),
        (
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "-1"}}},
            "Pod ml/p: spec.containers[0].resources.limits.nvidia.com/gpu: expected a quantity >= 0, got '-1'",
        ),
    ],
    ids=["request", "limit"],
)
def test_negative_pod_requests_are_refused(container: dict[str, Any], want: str) -> None:
    body = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"containers": [container]}}
    assert refused(parse_pod, body) == [want]


# -- limits ---------------------------------------------------------------------------------------------


def test_a_podgroup_with_too_many_subgroups_is_refused_without_reading_them() -> None:
    subgroups = [{"name": f"s{i}"} for i in range(MAX_SUBGROUPS + 1)]
    assert refused(parse_podgroup, podgroup({"subGroups": subgroups})) == [
        "PodGroup ml/pg: spec.subGroups: has 20,001 SubGroups; topogang's limit is 20,000 (the README lists the limits)"
    ]


# -- values shown as JSON -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ({"queue": True}, "PodGroup ml/pg: spec.queue: expected a string, got true"),
        (
            {"minMember": None, "markUnschedulable": "yes"},
            "PodGroup ml/pg: spec.markUnschedulable: expected true or false, got 'yes'",
        ),
        ({"minMember": {"a": None}}, 'PodGroup ml/pg: spec.minMember: expected an integer, got {"a": null}'),
        ({"subGroups": {"a": 1}}, "PodGroup ml/pg: spec.subGroups: expected a list, got an object"),
    ],
    ids=["bool", "string", "null-inside", "type-name"],
)
def test_messages_show_values_as_json_would(spec: dict[str, Any], want: str) -> None:
    assert refused(parse_podgroup, podgroup(spec)) == [want]


def test_a_null_label_value_says_null() -> None:
    body = {"metadata": {"name": "p", "namespace": "ml", "labels": {"team": None}}, "spec": {"containers": []}}
    assert refused(parse_pod, body) == ["Pod ml/p: metadata.labels.team: expected a string, got null"]


# -- what the design documents ask of these objects ---------------------------------------------------------


@pytest.mark.parametrize("value", [0, 2, -2])
def test_a_scheduling_backoff_other_than_minus_one_or_one_is_refused_naming_the_field(value: int) -> None:
    # KAI's hierarchical PodGroup design: "Currently only supporting -1 and 1".
    assert refused(parse_podgroup, podgroup({"schedulingBackoff": value})) == [
        f"PodGroup ml/pg: spec.schedulingBackoff: expected -1 (never mark) or 1 (mark after one failed attempt),"
        f" got {value}"
    ]
    for allowed in (-1, 1):
        assert parse_podgroup(podgroup({"schedulingBackoff": allowed})).scheduling_backoff == allowed


def test_a_resource_flavor_with_a_topology_and_no_node_label_is_refused() -> None:
    # Kueue's TAS KEP requires at least one label on a TAS flavor: without one it matches every node.
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "gpu"}}
    for spec in ({"topologyName": "dc"}, {"topologyName": "dc", "nodeLabels": {}}):
        assert refused(parse_resource_flavor, {**flavor, "spec": spec}) == [
            "ResourceFlavor gpu: spec.nodeLabels: a flavor with spec.topologyName (dc) needs at least one node label"
        ]
    ok = parse_resource_flavor({**flavor, "spec": {"topologyName": "dc", "nodeLabels": {"pool": "a"}}})
    assert ok.node_labels == (("pool", "a"),)
    assert parse_resource_flavor({**flavor, "spec": {}}).topology is None  # a flavor without TAS needs none
