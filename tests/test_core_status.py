"""GangScheduler.status: phase, message and the reason as data, for every stage of a gang's life.

Cluster: rack r1 of 4 nodes (z1-b1-r1-n1..n4), rack r2 of 4 nodes (z1-b1-r2-n1..n4), 8 GPUs each.
The gang `g`: 3 pods of 8 GPUs required in one rack.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from extender.core.cluster import ClusterState
from extender.core.decisions import INVALID, PENDING, SCHEDULED
from extender.core.scheduler import GangScheduler
from extender.core.standing import GroupStatus
from tests.builders import TOPO, grid, pod, podgroup

NODES = [n.name for n in grid(racks=2, nodes=4)]
RACK_CONSTRAINT = {"topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}


def setup(pods: int = 3, min_member: int = 3, gpus: int = 8) -> tuple[GangScheduler, list[str]]:
    state = ClusterState()
    for n in grid(racks=2, nodes=4):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    state.set_podgroup("default/g", podgroup({"minMember": min_member, **RACK_CONSTRAINT}, name="g"))
    scheduler = GangScheduler(state, plan_ttl=60)
    keys = []
    for i in range(pods):
        p = pod(f"g-{i}", group="g", gpus=gpus)
        scheduler.observe_pod(p)
        keys.append(p.key)
    return scheduler, keys


def filter_all(scheduler: GangScheduler, keys: list[str]) -> dict[str, str]:
    out = {}
    for k in keys:
        result = scheduler.filter(scheduler.state.pods[k], NODES, 0.0)
        if result.nodes:
            out[k] = result.nodes[0]
    return out


def bind_all(scheduler: GangScheduler, planned: dict[str, str]) -> None:
    for k, node in planned.items():
        for p, n in scheduler.bind(k, node, 1.0).bind:
            scheduler.observe_pod(replace(scheduler.state.pods[p], node_name=n))


def summary(s: GroupStatus) -> tuple[str, str, bool, int, int, int]:
    return (s.phase, s.reason, s.unschedulable, s.pods, s.planned, s.bound)


def test_incomplete_then_planned_then_scheduled() -> None:
    scheduler, keys = setup(pods=2)
    assert summary(scheduler.status("default/g")) == (PENDING, "GangIncomplete", True, 2, 0, 0)
    scheduler.observe_pod(pod("g-2", group="g"))
    assert summary(scheduler.status("default/g")) == (PENDING, "Waiting", False, 3, 0, 0)
    planned = filter_all(scheduler, [*keys, "default/g-2"])
    status = scheduler.status("default/g")
    assert summary(status) == (PENDING, "Planned", False, 3, 3, 0)
    assert list(status.domains) == ["default/g"]
    bind_all(scheduler, planned)
    status = scheduler.status("default/g")
    assert summary(status) == (SCHEDULED, "Scheduled", False, 3, 3, 3)
    assert status.message == "3 pod(s) bound"


def test_the_domains_outlive_the_carried_out_plan() -> None:
    scheduler, keys = setup()
    bind_all(scheduler, filter_all(scheduler, keys))
    domains = dict(scheduler.status("default/g").domains)
    scheduler.expire(2.0)  # the sweep forgets the carried-out plan
    assert "default/g" not in scheduler.plans
    assert scheduler.status("default/g").domains == domains
    for k in keys:
        scheduler.delete_pod(k)
    scheduler.expire(3.0)  # the gang is gone: so is what we knew of it
    assert "default/g" not in scheduler.plans.last_domains


def test_a_gang_no_rack_holds_carries_the_shortfall_kind() -> None:
    scheduler, keys = setup(pods=5, min_member=5)  # 5 pods of 8 GPUs; a rack has 4 nodes
    filter_all(scheduler, keys)
    status = scheduler.status("default/g")
    assert summary(status) == (PENDING, "NoDomain", True, 5, 0, 0)
    assert status.message.startswith("PodGroup default/g: 5 pods x")


@pytest.mark.parametrize(
    ("release", "reason"),
    [
        (lambda s, keys: s.gate_timeout("default/g", 1.0), "BindTimeout"),
        (lambda s, keys: s.expire(1000.0), "PlanExpired"),
    ],
    ids=["gate-timeout", "plan-expired"],
)
def test_a_released_plan_says_why_as_data(release: object, reason: str) -> None:
    scheduler, keys = setup()
    planned = filter_all(scheduler, keys)
    scheduler.bind(keys[0], planned[keys[0]], 1.0)
    release(scheduler, keys)  # type: ignore[operator]
    status = scheduler.status("default/g")
    assert summary(status) == (PENDING, reason, True, 3, 0, 0)
    assert status.domains == {}


def test_a_podgroup_object_without_pods_is_pending_with_zero_pods() -> None:
    scheduler, _ = setup(pods=0)
    status = scheduler.status("default/g")
    assert summary(status) == (PENDING, "GangIncomplete", True, 0, 0, 0)
    assert status.message == "PodGroup default/g: gang 0/3 pods present"


def test_an_invalid_podgroup_object_without_pods_is_invalid_with_its_errors() -> None:
    scheduler, _ = setup(pods=0)
    bad = podgroup({"minMember": 1, "topologyConstraints": {"global": {"requiredTopologyLevel": "row"}}}, name="bad")
    scheduler.state.set_podgroup("default/bad", bad)
    status = scheduler.status("default/bad")
    assert summary(status) == (INVALID, "Invalid", True, 0, 0, 0)
    assert "requiredTopologyLevel" in status.message
    unknown = scheduler.status("default/nothing")
    assert (unknown.phase, unknown.reason) == (INVALID, "Invalid")


def test_a_status_only_update_of_a_podgroup_changes_nothing_that_plans() -> None:
    scheduler, _ = setup()
    version = scheduler.state.version
    scheduler.state.set_podgroup("default/g", podgroup({"minMember": 3, **RACK_CONSTRAINT}, name="g"))
    assert scheduler.state.version == version  # the same spec: no regrouping, no dropped views
    scheduler.state.set_podgroup("default/g", podgroup({"minMember": 2, **RACK_CONSTRAINT}, name="g"))
    assert scheduler.state.version == version + 1


def test_a_gang_whose_pods_all_ended_is_finished_not_incomplete() -> None:
    scheduler, keys = setup()
    planned = filter_all(scheduler, keys)
    for k in keys:
        for p, n in scheduler.bind(k, planned[k], 1.0).bind:
            scheduler.observe_pod(replace(scheduler.state.pods[p], node_name=n))
    for k, ended in zip(keys, ("Succeeded", "Succeeded", "Failed"), strict=True):
        scheduler.observe_pod(replace(scheduler.state.pods[k], phase=ended))
    status = scheduler.status("default/g")
    assert (status.phase, status.reason, status.pods, status.bound) == ("Finished", "Finished", 3, 3)
    assert status.message == "finished: 2 pod(s) succeeded, 1 failed"
    assert not status.unschedulable
