"""Devices per node and a pod's demand for devices (extender/core/dra), through ClusterState.

Cluster: rack r1 of 2 nodes (z1-b1-r1-n1, n2), rack r2 of 2 nodes (z1-b1-r2-n1, n2), no
device-plugin GPUs; the driver gpu.example.com publishes 8 devices per node unless a test says
otherwise, and the DeviceClass gpu.example.com selects them by driver.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from extender.core.cluster import ClusterState
from extender.core.dra import device_key
from extender.model.node import NodeInfo
from tests.builders import GPU, grid
from tests.dra_builders import (
    CLASS,
    DRIVER,
    claim,
    claim_pod,
    device_class,
    device_slice,
    exactly,
    publish,
    template,
)

KEY = device_key(CLASS)
NODES = [n.name for n in grid(racks=2, nodes=2)]


def cluster(count: int = 8, nodes: list[NodeInfo] | None = None) -> ClusterState:
    state = ClusterState()
    for n in nodes or grid(racks=2, nodes=2, gpus=0):
        state.upsert_node(n)
    publish(state, NODES, count)
    return state


def free(state: ClusterState, resource: str = KEY) -> list[int]:
    return [int(v) // 1000 for v in state.snapshot().free(resource)]


def test_each_node_has_the_devices_of_its_slices() -> None:
    state = cluster()
    assert free(state) == [8, 8, 8, 8]


def test_a_slice_shared_through_a_node_selector_counts_on_the_nodes_it_reaches() -> None:
    state = cluster()
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "example.com/topology-rack", "operator": "In", "values": ["r2"]}]}
        ]
    }
    shared = device_slice(None, count=2, nodeSelector=selector)
    state.set_dra("ResourceSlice", shared.name, shared)
    assert free(state) == [8, 8, 10, 10]


def test_an_older_generation_of_a_pool_is_not_counted() -> None:
    state = cluster()
    newer = device_slice("z1-b1-r1-n1", count=4)
    newer = replace(newer, name="again", generation=2)
    state.set_dra("ResourceSlice", "again", newer)
    assert free(state) == [4, 8, 8, 8]


def test_a_pod_asks_for_the_devices_of_its_template() -> None:
    state = cluster()
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(4)))
    state.upsert_pod(claim_pod("p"))
    assert state.pods["default/p"].requests[KEY] == 4000


def test_all_asks_for_every_device_of_a_node() -> None:
    state = cluster()
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(None, mode="All")))
    state.upsert_pod(claim_pod("p"))
    assert state.pods["default/p"].requests[KEY] == 8000


def test_first_available_takes_the_first_subrequest_some_node_can_meet() -> None:
    state = cluster()
    first = {"firstAvailable": [{"name": "sixteen", **exactly(16)}, {"name": "eight", **exactly(8)}]}
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", first))
    state.upsert_pod(claim_pod("p"))
    assert state.pods["default/p"].requests[KEY] == 8000
    assert not state.pods["default/p"].device_errors


def test_the_claim_made_from_the_template_replaces_it_and_asks_nothing_once_allocated() -> None:
    state = cluster()
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(8)))
    state.upsert_pod(claim_pod("p", generated="p-gpu"))  # the claim is not visible yet: the template counts
    assert state.pods["default/p"].requests[KEY] == 8000
    state.set_dra("ResourceClaim", "default/p-gpu", claim("p-gpu", exactly(2)))
    _ = state.table  # counts the changed claims again
    assert state.pods["default/p"].requests[KEY] == 2000
    held = [("z1-b1-r1-n1", "gpu-0"), ("z1-b1-r1-n1", "gpu-1")]
    state.set_dra("ResourceClaim", "default/p-gpu", claim("p-gpu", exactly(2), allocated=held))
    _ = state.table  # counts the changed claims again
    assert KEY not in state.pods["default/p"].requests
    assert free(state) == [6, 8, 8, 8]


def test_a_claim_shared_by_several_pods_counts_once() -> None:
    state = cluster()
    state.set_dra("ResourceClaim", "default/shared", claim("shared", exactly(2)))
    for name in ("a", "b", "c"):
        state.upsert_pod(claim_pod(name, claim_name="shared"))
    _ = state.table  # counts the changed claims again
    asked = {k: p.requests.get(KEY, 0) for k, p in state.pods.items()}
    assert asked == {"default/a": 2000, "default/b": 0, "default/c": 0}
    state.delete_pod("default/a")
    _ = state.table  # counts the changed claims again
    assert state.pods["default/b"].requests[KEY] == 2000


def test_a_podgroups_claim_made_from_a_template_for_all_its_pods_counts_once() -> None:
    # Kubernetes' PodGroup spec.resourceClaims (KEP-5729): kube-controller-manager makes one claim
    # from the template for the whole group and names it in each pod's resourceClaimStatuses.
    state = cluster()
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(2)))
    state.set_dra("ResourceClaim", "default/train-gpu", claim("train-gpu", exactly(2)))
    for name in ("a", "b", "c"):
        state.upsert_pod(claim_pod(name, generated="train-gpu"))
    _ = state.table  # counts the changed claims again
    asked = {k: p.requests.get(KEY, 0) for k, p in state.pods.items()}
    assert asked == {"default/a": 2000, "default/b": 0, "default/c": 0}


def test_a_device_held_by_two_claims_is_counted_once() -> None:
    state = cluster()
    held = [("z1-b1-r2-n2", "gpu-3")]
    state.set_dra("ResourceClaim", "default/x", claim("x", exactly(1), allocated=held))
    state.set_dra("ResourceClaim", "default/y", claim("y", exactly(1), allocated=held))
    assert free(state) == [8, 8, 8, 7]


def test_a_class_that_does_not_exist_is_an_error_naming_the_template_field() -> None:
    state = cluster()
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(8, cls="gpu.nope")))
    state.upsert_pod(claim_pod("p"))
    [error] = state.pods["default/p"].device_errors
    assert str(error) == (
        "ResourceClaimTemplate default/gpus: spec.spec.devices.requests[0].exactly: "
        "deviceClassName: names DeviceClass 'gpu.nope', which does not exist"
    )


def test_more_devices_than_any_node_has_is_an_error() -> None:
    state = cluster()
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(9)))
    state.upsert_pod(claim_pod("p"))
    [error] = state.pods["default/p"].device_errors
    assert error.message == "asks for 9 device(s) of DeviceClass 'gpu.example.com'; the most any node has is 8"


def test_a_selector_that_does_not_compile_is_an_error() -> None:
    state = cluster()
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(1, selectors=["device.driver =="])))
    state.upsert_pod(claim_pod("p"))
    [error] = state.pods["default/p"].device_errors
    assert error.message.startswith("selector 'device.driver ==' does not compile")


def test_a_selector_topogang_cannot_evaluate_leaves_the_request_to_kube_scheduler() -> None:
    state = cluster()
    expression = f'cel.bind(d, device.attributes["{DRIVER}"], d.model == "H100")'
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(8, selectors=[expression])))
    state.upsert_pod(claim_pod("p"))
    pod = state.pods["default/p"]
    assert not pod.device_errors
    assert not any(r.startswith("devices/") for r in pod.requests)
    [warning] = pod.device_warnings
    assert "kube-scheduler decides where these devices fit" in warning


def test_a_request_selector_narrows_the_devices_counted() -> None:
    state = cluster()
    expression = f'device.attributes["{DRIVER}"].index < 2'
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(2, selectors=[expression])))
    state.upsert_pod(claim_pod("p"))
    [key] = [r for r in state.pods["default/p"].requests if r.startswith("devices/")]
    assert key == device_key(CLASS, (expression,))
    assert free(state, key) == [2, 2, 2, 2]


def test_an_extended_resource_backed_by_a_class_counts_devices_where_no_plugin_gives_it() -> None:
    # n1 of each rack has 8 device-plugin GPUs; the other nodes only DRA devices (4 each).
    nodes = [
        n if n.name.endswith("n1") else replace(n, allocatable={k: v for k, v in n.allocatable.items() if k != GPU})
        for n in grid(racks=2, nodes=2)
    ]
    state = cluster(count=4, nodes=nodes)
    state.set_dra("DeviceClass", CLASS, device_class(extended=GPU))
    assert free(state, GPU) == [8, 4, 8, 4]
    state.set_dra("ResourceClaim", "default/x", claim("x", exactly(1), allocated=[("z1-b1-r1-n2", "gpu-0")]))
    assert free(state, GPU) == [8, 3, 8, 4]
    assert np.array_equal(state.snapshot().free(KEY), np.array([4000, 3000, 4000, 4000]))
