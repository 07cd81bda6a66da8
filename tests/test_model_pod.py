"""Pod requests as kube-scheduler counts them, quantities, and node parsing."""

from __future__ import annotations

from typing import Any

import pytest

from extender.model.errors import InvalidObject
from extender.model.node import parse_node
from extender.model.pod import parse_pod
from extender.model.quantity import QuantityError, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("1", 1000),
        ("500m", 500),
        ("1.5", 1500),
        ("1Ki", 1_024_000),
        ("2Gi", 2 * 2**30 * 1000),
        ("1k", 1_000_000),
        ("1e3", 1_000_000),
        ("0.1m", 1),
        (8, 8000),
        ("100n", 1),
    ],
)
def test_quantities(text: object, milli: int) -> None:
    assert parse_quantity(text) == milli


@pytest.mark.parametrize("text", ["", "1Zi", "abc", "1.2.3", None, True, "--1"])
def test_bad_quantities(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_format_quantity() -> None:
    assert format_quantity("memory", 16 * 2**30 * 1000) == "16Gi"
    assert format_quantity("cpu", 500) == "500m"
    assert format_quantity("nvidia.com/gpu", 8000) == "8"


def pod_with(spec: dict[str, Any]) -> Any:
    return parse_pod({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})


def c(requests: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests}, **extra}


def test_requests_are_max_of_containers_and_init_plus_overhead_and_a_slot() -> None:
    p = pod_with(
        {
            "containers": [c({"cpu": "1", "nvidia.com/gpu": "4"}), c({"cpu": "500m"})],
            "initContainers": [c({"cpu": "3"})],
            "overhead": {"cpu": "100m"},
        }
    )
    assert p.requests == {"cpu": 3100, "nvidia.com/gpu": 4000, "pods": 1000}


def test_sidecars_add_to_containers_and_to_later_init_containers() -> None:
    p = pod_with(
        {
            "containers": [c({"cpu": "1"})],
            "initContainers": [c({"cpu": "2"}, restartPolicy="Always"), c({"cpu": "2"})],
        }
    )
    # sidecar 2 + container 1 = 3; init peak = sidecar 2 + init 2 = 4
    assert p.requests["cpu"] == 4000


def test_limits_default_requests() -> None:
    p = pod_with({"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]})
    assert p.requests["nvidia.com/gpu"] == 8000


def test_bad_pod_names_the_field() -> None:
    with pytest.raises(InvalidObject) as exc:
        pod_with({"containers": [c({"cpu": "lots"})]})
    assert str(exc.value) == (
        "Pod ns/p: spec.containers[0].resources.requests.cpu: "
        "expected a quantity such as '8', '500m' or '16Gi', got 'lots'"
    )


def test_node_ready_cordoned_taints_and_capacity_fallback() -> None:
    n = parse_node(
        {
            "metadata": {"name": "n1", "labels": {"a": "b"}},
            "spec": {"unschedulable": True, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"capacity": {"nvidia.com/gpu": 8}, "conditions": [{"type": "Ready", "status": "False"}]},
        }
    )
    assert (n.ready, n.unschedulable, n.schedulable) == (False, True, False)
    assert n.allocatable["nvidia.com/gpu"] == 8000
    assert n.allocatable["pods"] == 110_000
    assert str(n.taints[0]) == "k=v:NoSchedule"


def test_bad_node_names_the_field() -> None:
    with pytest.raises(InvalidObject) as exc:
        parse_node({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "x"}}})
    assert str(exc.value).startswith("Node n1: status.allocatable.cpu: expected a quantity")


def test_a_quantity_text_parsed_again_comes_from_the_bounded_cache_and_bad_or_long_texts_are_never_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from extender.model import quantity

    monkeypatch.setattr(quantity, "_PARSED", {})
    monkeypatch.setattr(quantity, "PARSED_MAX_ENTRIES", 3)
    assert parse_quantity("500m") == 500
    assert parse_quantity("500m") == 500
    assert parse_quantity("16Gi") == 16 * 2**30 * 1000
    assert quantity._PARSED == {"500m": 500, "16Gi": 16 * 2**30 * 1000}
    long = "0" * 40 + "7"  # past PARSED_MAX_TEXT: parsed, not kept
    assert parse_quantity(long) == 7000
    with pytest.raises(QuantityError):
        parse_quantity("8 GPUs")
    with pytest.raises(QuantityError):
        parse_quantity("8 GPUs")  # an error is raised every time, never cached
    assert parse_quantity("1") == 1000
    assert parse_quantity("2") == 2000  # the cache is full (3): parsed, not kept
    assert set(quantity._PARSED) == {"500m", "16Gi", "1"}


def test_the_bind_time_is_the_pod_scheduled_condition_once_true_and_never_an_error() -> None:
    def scheduled(conditions: object) -> float | None:
        return parse_pod({"metadata": {"name": "p"}, "status": {"conditions": conditions}}).scheduled_at

    true = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-27T10:00:01Z"}
    assert scheduled([{"type": "Ready", "status": "True"}, true]) == 1795773601.0
    assert scheduled([{**true, "status": "False", "reason": "Unschedulable"}]) is None
    # Written by the API server; a malformed one costs the pod nothing but this time.
    assert scheduled([{**true, "lastTransitionTime": "yesterday"}]) is None
    assert scheduled("not a list") is None
    assert scheduled(None) is None


# -- pod-level resources (spec.resources, PodLevelResources: on by default since 1.34) -----------

GI = 2**30 * 1000  # one Gi in milli-units


def plr(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if requests is not None:
        out["requests"] = requests
    if limits is not None:
        out["limits"] = limits
    return out


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"containers": [{"name": "c"}], "resources": plr({"cpu": "16"})},
            {"cpu": 16000},
            id="pod-level request, containers ask nothing",
        ),
        pytest.param(
            {
                "containers": [c({"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "8"})],
                "resources": plr({"cpu": "16", "memory": "64Gi"}),
            },
            {"cpu": 16000, "memory": 64 * GI, "nvidia.com/gpu": 8000},
            id="pod-level cpu and memory replace the containers', GPUs still come from containers",
        ),
        pytest.param(
            {"containers": [c({"cpu": "2", "memory": "1Gi"})], "resources": plr({"memory": "8Gi"})},
            {"cpu": 2000, "memory": 8 * GI},
            id="only what pod-level requests name is replaced",
        ),
        pytest.param(
            {"containers": [c({"cpu": "1"})], "initContainers": [c({"cpu": "8"})], "resources": plr({"cpu": "4"})},
            {"cpu": 4000},
            id="pod-level replaces the init containers' peak too",
        ),
        pytest.param(
            {"containers": [{"name": "c"}], "resources": plr(limits={"cpu": "16", "memory": "32Gi"})},
            {"cpu": 16000, "memory": 32 * GI},
            id="API server defaulting: a pod-level limit is the request when none is written",
        ),
        pytest.param(
            {"containers": [c({"cpu": "2"})], "resources": plr(limits={"cpu": "16"})},
            {"cpu": 2000},
            id="API server defaulting: the containers' cpu before the pod-level limit",
        ),
        pytest.param(
            {"containers": [c({"nvidia.com/gpu": "8"})], "resources": plr({"nvidia.com/gpu": "2"})},
            {"nvidia.com/gpu": 8000},
            id="extended resources are never taken from pod level",
        ),
        pytest.param(
            {"containers": [c({"hugepages-2Mi": "1Gi"})], "resources": plr({"hugepages-2Mi": "2Gi", "cpu": "1"})},
            {"hugepages-2Mi": 2 * GI, "cpu": 1000},
            id="hugepages are a pod-level resource",
        ),
        pytest.param(
            {"containers": [c({"cpu": "1"})], "resources": plr({"cpu": "4"}), "overhead": {"cpu": "250m"}},
            {"cpu": 4250},
            id="the overhead is added to pod-level requests",
        ),
        pytest.param(
            {"containers": [c({"cpu": "3"})], "resources": {}},
            {"cpu": 3000},
            id="empty spec.resources: the containers'",
        ),
    ],
)
def test_pod_level_requests_count_as_kube_scheduler_counts_them(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_with(spec).requests == {**expected, "pods": 1000}


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        (plr({"cpu": "lots"}), "spec.resources.requests.cpu"),
        (plr(limits={"memory": "-1Gi"}), "spec.resources.limits.memory"),
        ([{"cpu": "1"}], "spec.resources"),
    ],
)
def test_a_bad_pod_level_value_names_its_field(resources: object, field: str) -> None:
    with pytest.raises(InvalidObject) as exc:
        pod_with({"containers": [{"name": "c"}], "resources": resources})
    assert [e.field for e in exc.value.errors] == [field]


# -- in-place resize: a pod on a node counts the larger of its spec and its status ----------------


def bound(spec: dict[str, Any], status: dict[str, Any]) -> Any:
    return parse_pod(
        {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1", **spec}, "status": status}
    )


def cs(name: str = "c", allocated: dict[str, str] | None = None, actuated: dict[str, str] | None = None) -> Any:
    out: dict[str, Any] = {"name": name}
    if allocated is not None:
        out["allocatedResources"] = allocated
    if actuated is not None:
        out["resources"] = {"requests": actuated}
    return out


def resize(reason: str) -> dict[str, Any]:
    return {"type": "PodResizePending", "status": "True", "reason": reason}


@pytest.mark.parametrize(
    ("spec", "status", "cpu"),
    [
        pytest.param(
            {"containers": [c({"cpu": "2"})]},
            {"containerStatuses": [cs(allocated={"cpu": "4"}, actuated={"cpu": "4"})]},
            4000,
            id="shrunk in the spec, not yet by the kubelet: the allocation counts",
        ),
        pytest.param(
            {"containers": [c({"cpu": "2"})]},
            {"containerStatuses": [cs(allocated={"cpu": "2"}, actuated={"cpu": "3"})]},
            3000,
            id="still actuated above its allocation: the actuated counts",
        ),
        pytest.param(
            {"containers": [c({"cpu": "8"})]},
            {"containerStatuses": [cs(allocated={"cpu": "2"})], "conditions": [resize("Deferred")]},
            8000,
            id="grown in the spec, resize deferred: the spec counts",
        ),
        pytest.param(
            {"containers": [c({"cpu": "8"})]},
            {
                "containerStatuses": [cs(allocated={"cpu": "2"}, actuated={"cpu": "2"})],
                "conditions": [resize("Infeasible")],
            },
            2000,
            id="grown in the spec, resize infeasible: only what the kubelet allocated counts",
        ),
        pytest.param(
            {
                "containers": [c({"cpu": "8"})],
                "initContainers": [c({"cpu": "1"}, restartPolicy="Always") | {"name": "s"}],
            },
            {"initContainerStatuses": [cs("s", allocated={"cpu": "3"})]},
            11000,
            id="a sidecar's allocation counts like a container's",
        ),
        pytest.param(
            {"containers": [c({"cpu": "1", "memory": "1Gi"})], "resources": plr({"cpu": "4"})},
            {"resources": {"requests": {"cpu": "6"}}, "allocatedResources": {"cpu": "6", "memory": "1Gi"}},
            6000,
            id="pod-level resize: the pod's own status counts",
        ),
        pytest.param(
            {"containers": [c({"cpu": "1"})], "resources": plr({"cpu": "8"})},
            {
                "resources": {"requests": {"cpu": "4"}},
                "allocatedResources": {"cpu": "4"},
                "conditions": [resize("Infeasible")],
            },
            4000,
            id="pod-level resize infeasible: the pod's status alone",
        ),
        pytest.param(
            {"containers": [c({"cpu": "1"})]},
            {"resources": {"requests": {"cpu": "5"}}, "allocatedResources": {"cpu": "5"}},
            5000,
            id="the pod-level status stands for its containers' when both are written",
        ),
    ],
)
def test_a_resized_pod_counts_as_kube_scheduler_counts_it(
    spec: dict[str, Any], status: dict[str, Any], cpu: int
) -> None:
    assert bound(spec, status).requests["cpu"] == cpu


def test_a_pod_being_scheduled_counts_its_spec_alone() -> None:
    spec = {"containers": [c({"cpu": "2"})]}
    status = {"containerStatuses": [cs(allocated={"cpu": "4"})], "nominatedNodeName": "n2"}
    p = parse_pod({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec, "status": status})
    assert (p.requests["cpu"], p.nominated_node) == (2000, "n2")


def test_a_bad_status_allocation_names_its_field() -> None:
    with pytest.raises(InvalidObject) as exc:
        bound({"containers": [c({"cpu": "1"})]}, {"containerStatuses": [cs(allocated={"cpu": "x"})]})
    assert [e.field for e in exc.value.errors] == ["status.containerStatuses[0].allocatedResources.cpu"]
