"""extender.core.apply: where each kind of object lands in the cluster view (simulator and cache)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.apply import apply_object, delete_object
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.model.errors import InvalidObject


def meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    return {"name": name, **({"namespace": namespace} if namespace else {})}


NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": meta("n1"),
    "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "8"}},
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {**meta("p1", "ml"), "uid": "u1"},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
}
PODGROUP = {
    "apiVersion": "scheduling.topogang.io/v1alpha1",
    "kind": "PodGroup",
    "metadata": meta("pg", "ml"),
    "spec": {"minMember": 2},
}
KAI_PODGROUP = {**PODGROUP, "apiVersion": "scheduling.run.ai/v2alpha2", "metadata": meta("kai", "ml")}
TOPOLOGY = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Topology",
    "metadata": meta("dc"),
    "spec": {"levels": [{"nodeLabel": "example.com/rack"}]},
}
PRIORITY = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": meta("high"), "value": 1000}
RI = {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "ResourceInterface", "metadata": meta("ri"), "spec": {}}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta("train", "ml"), "spec": {}}
OTHER_PODGROUP = {"apiVersion": "example.com/v1", "kind": "PodGroup", "metadata": meta("x", "ml")}


def where(state: ClusterState) -> dict[str, list[object]]:
    return {
        "nodes": sorted(state.nodes),
        "pods": sorted(state.pods),
        "podgroups": sorted(state.podgroups),
        "invalid": sorted(state.invalid_podgroups),
        "topologies": sorted(state.topologies),
        "priority": sorted(state.priority_classes.items()),
        "ris": sorted(state.resource_interfaces),
        "objects": sorted(state.objects),
    }


EMPTY = {k: [] for k in ("nodes", "pods", "podgroups", "invalid", "topologies", "priority", "ris", "objects")}


@pytest.mark.parametrize(
    ("body", "lands"),
    [
        pytest.param(NODE, {"nodes": ["n1"]}, id="node"),
        pytest.param(POD, {"pods": ["ml/p1"]}, id="pod"),
        pytest.param(PODGROUP, {"podgroups": ["ml/pg"]}, id="topogang-podgroup"),
        pytest.param(KAI_PODGROUP, {"podgroups": ["ml/kai"]}, id="kai-podgroup"),
        pytest.param(TOPOLOGY, {"topologies": ["dc"]}, id="kueue-topology"),
        pytest.param(PRIORITY, {"priority": [("high", 1000)]}, id="priorityclass"),
        pytest.param(RI, {"ris": ["ri"]}, id="resourceinterface"),
        pytest.param(JOB, {"objects": [("batch", "Job", "ml", "train")]}, id="owner"),
        pytest.param(OTHER_PODGROUP, {"objects": [("example.com", "PodGroup", "ml", "x")]}, id="foreign-podgroup"),
    ],
)
def test_each_kind_lands_in_its_place_and_delete_takes_it_out(body: dict[str, Any], lands: dict[str, Any]) -> None:
    scheduler = GangScheduler(ClusterState())
    version = scheduler.state.version
    assert apply_object(scheduler, body) == ()
    assert where(scheduler.state) == {**EMPTY, **lands}
    assert scheduler.state.version > version
    delete_object(scheduler, {"apiVersion": body["apiVersion"], "kind": body["kind"], "metadata": body["metadata"]})
    assert where(scheduler.state) == EMPTY


def test_a_podgroup_that_does_not_parse_is_stored_invalid_with_its_field_errors() -> None:
    scheduler = GangScheduler(ClusterState())
    errors = apply_object(scheduler, {**PODGROUP, "spec": {"minMember": "lots"}})
    assert [(e.obj, e.field) for e in errors] == [("PodGroup ml/pg", "spec.minMember")]
    assert scheduler.state.invalid_podgroups == {"ml/pg": errors}
    assert apply_object(scheduler, PODGROUP) == ()  # fixed: valid again
    assert (list(scheduler.state.podgroups), scheduler.state.invalid_podgroups) == (["ml/pg"], {})


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({**NODE, "status": {"allocatable": {"cpu": "eight"}}}, "status.allocatable.cpu", id="node"),
        pytest.param({**TOPOLOGY, "spec": {"levels": []}}, "spec.levels", id="topology"),
        pytest.param({**PRIORITY, "value": "high"}, "value", id="priorityclass"),
    ],
)
def test_other_objects_that_do_not_parse_raise_and_the_view_keeps_the_last_good_version(
    body: dict[str, Any], field: str
) -> None:
    scheduler = GangScheduler(ClusterState())
    good = {NODE["kind"]: NODE, TOPOLOGY["kind"]: TOPOLOGY, PRIORITY["kind"]: PRIORITY}[body["kind"]]
    apply_object(scheduler, good)
    before = where(scheduler.state)
    with pytest.raises(InvalidObject) as caught:
        apply_object(scheduler, body)
    assert [e.field for e in caught.value.errors] == [field]
    assert where(scheduler.state) == before


def test_a_priority_class_without_a_value_says_null() -> None:
    from extender.core.apply import parse_priority_class
    from extender.model.errors import InvalidObject

    with pytest.raises(InvalidObject) as caught:
        parse_priority_class({"metadata": {"name": "high"}, "value": None})
    assert "got null" in str(caught.value)
    assert "None" not in str(caught.value)
