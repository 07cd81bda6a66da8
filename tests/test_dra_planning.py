"""Gangs whose GPUs come through ResourceClaims, planned by the core like device-plugin GPUs.

Cluster: rack r1 (z1-b1-r1-n1..n4) and rack r2 (z1-b1-r2-n1..n4); each node publishes 8
devices of driver gpu.example.com and has no device-plugin GPUs unless a test says otherwise.
Gangs: pods with one claim from the template `gpus` (8 devices), all in one rack.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import structlog
from structlog.testing import capture_logs

from extender.core.cluster import ClusterState
from extender.core.decisions import BIND, REJECT, PlanEvent
from extender.core.explain import explain
from extender.core.scheduler import GangScheduler
from extender.server import reporting
from extender.server.reporting import Reporter
from tests.builders import GPU, TOPO, grid, pod, podgroup
from tests.dra_builders import DRIVER, claim, claim_pod, exactly, publish, template

NODES = [n.name for n in grid(racks=2, nodes=4)]
IN_A_RACK = {"topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}


def cluster(dra_nodes: list[str] = NODES, plugin_gpus: int = 0) -> GangScheduler:
    state = ClusterState()
    for n in grid(racks=2, nodes=4, gpus=plugin_gpus):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    publish(state, dra_nodes)
    state.set_dra("ResourceClaimTemplate", "default/gpus", template("gpus", exactly(8)))
    return GangScheduler(state)


def gang(scheduler: GangScheduler, name: str, size: int, template_name: str = "gpus") -> list[str]:
    scheduler.state.set_podgroup(f"default/{name}", podgroup({"minMember": size, **IN_A_RACK}, name=name))
    keys = []
    for i in range(size):
        p = claim_pod(f"{name}-{i}", template_name=template_name, group=name)
        scheduler.observe_pod(p)
        keys.append(p.key)
    return keys


def plan(scheduler: GangScheduler, keys: list[str]) -> dict[str, str]:
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    found = scheduler.plans.get(scheduler.membership.group_of(keys[0]) or "")
    return dict(found.reserved) if found else {}


def test_pods_of_eight_devices_each_get_a_node_each_in_one_rack() -> None:
    scheduler = cluster()
    planned = plan(scheduler, gang(scheduler, "g", 3))
    assert len(planned) == 3
    assert len(set(planned.values())) == 3  # not three pods on one node: the bug this fixes
    assert len({n.rsplit("-", 1)[0] for n in planned.values()}) == 1


def test_two_gangs_never_plan_the_same_devices() -> None:
    scheduler = cluster()
    first = plan(scheduler, gang(scheduler, "a", 4))
    second = plan(scheduler, gang(scheduler, "b", 4))
    assert len(first) == len(second) == 4
    assert max(Counter([*first.values(), *second.values()]).values()) == 1
    assert {n.rsplit("-", 1)[0] for n in first.values()} != {n.rsplit("-", 1)[0] for n in second.values()}


def test_a_gang_that_needs_more_devices_than_a_rack_has_waits_with_the_reason() -> None:
    scheduler = cluster()
    keys = gang(scheduler, "big", 5)
    assert plan(scheduler, keys) == {}
    message = scheduler.status("default/big").message
    assert "5 pods x {cpu: 1, devices/gpu.example.com: 8} in one rack" in message, message
    assert message.endswith("the best rack fits 4 even with nothing running"), message


def test_a_gang_with_bad_claims_is_invalid_and_the_others_are_still_placed() -> None:
    scheduler = cluster()
    scheduler.state.set_dra("ResourceClaimTemplate", "default/nope", template("nope", exactly(8, cls="gpu.nope")))
    bad = gang(scheduler, "bad", 2, template_name="nope")
    assert plan(scheduler, bad) == {}
    status = scheduler.status("default/bad")
    assert "names DeviceClass 'gpu.nope', which does not exist" in status.message, status.message
    assert len(plan(scheduler, gang(scheduler, "good", 2))) == 2


def test_a_mixed_cluster_places_device_plugin_gangs_and_dra_gangs() -> None:
    # rack r1: device-plugin GPUs only; rack r2: DRA devices only.
    r2 = [n for n in NODES if "-r2-" in n]
    scheduler = cluster(dra_nodes=r2, plugin_gpus=8)
    for n in r2:
        info = scheduler.state.nodes[n]
        scheduler.state.upsert_node(replace(info, allocatable={k: v for k, v in info.allocatable.items() if k != GPU}))
    dra = plan(scheduler, gang(scheduler, "dra", 4))
    scheduler.state.set_podgroup("default/plugin", podgroup({"minMember": 4, **IN_A_RACK}, name="plugin"))
    plugin_pods = [pod(f"plugin-{i}", group="plugin") for i in range(4)]
    for p in plugin_pods:
        scheduler.observe_pod(p)
    plugin = plan(scheduler, [p.key for p in plugin_pods])
    assert {n.split("-")[2] for n in dra.values()} == {"r2"}
    assert {n.split("-")[2] for n in plugin.values()} == {"r1"}


def test_explain_shows_the_devices_asked_and_free_per_domain() -> None:
    scheduler = cluster()
    keys = gang(scheduler, "big", 5)
    plan(scheduler, keys)
    [line] = explain(scheduler, "default/big").devices
    assert line == (
        "devices/gpu.example.com: 40 asked by 5 unbound pod(s); 64 free in the cluster; "
        "free per rack: z1/b1/r1 32, z1/b1/r2 32"
    )


def test_devices_of_a_planned_node_allocated_elsewhere_while_members_wait_replan_once_with_the_reason() -> None:
    scheduler = cluster()
    keys = gang(scheduler, "g", 3)
    planned = plan(scheduler, keys)
    for key in keys[:2]:
        scheduler.bind(key, planned[key], 0.0)
    # Another workload's claim was given all 8 devices of the third pod's planned node.
    taken = planned[keys[2]]
    held = [(taken, f"gpu-{i}") for i in range(8)]
    scheduler.state.set_dra("ResourceClaim", "default/other", claim("other", exactly(8), allocated=held))
    last = scheduler.bind(keys[2], taken, 1.0)
    assert last.action == REJECT
    assert last.stale == (taken,)
    assert last.event is not None
    assert last.event.outcome == "replanned"
    assert taken not in scheduler.reserved("default/g").values()
    assert last.error == (
        f"topogang: re-planning: planned node(s) {taken} no longer fit"
        " (deleted, cordoned, not ready or full); planned again"
    )


def test_a_claim_allocated_by_kube_scheduler_on_the_planned_node_is_not_counted_twice() -> None:
    scheduler = cluster()
    keys = gang(scheduler, "g", 3)
    planned = plan(scheduler, keys)
    # kube-scheduler's PreBind allocates the first pod's claim on its planned node.
    node = planned[keys[0]]
    made = "g-0-gpus-x1"
    scheduler.observe_pod(claim_pod("g-0", group="g", generated=made))
    scheduler.state.set_dra(
        "ResourceClaim", f"default/{made}", claim(made, exactly(8), allocated=[(node, f"gpu-{i}") for i in range(8)])
    )
    assert scheduler.state.free_on(node, "devices/gpu.example.com") == 0  # 8 held, not 16
    assert scheduler.plans.still_fits(node)
    decisions = [scheduler.bind(k, planned[k], 0.0) for k in keys]
    assert decisions[-1].action == BIND


def test_a_selector_left_to_kube_scheduler_is_in_the_gangs_placement_log_line(monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler = cluster()
    expression = f'cel.bind(d, device.attributes["{DRIVER}"], d.model == "H100")'
    scheduler.state.set_dra("ResourceClaimTemplate", "default/odd", template("odd", exactly(8, selectors=[expression])))
    keys = gang(scheduler, "odd", 2, template_name="odd")
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    event = scheduler.plans.get("default/odd")
    assert event is not None
    reporter = Reporter(scheduler.lookup, None, None)  # type: ignore[arg-type]
    # The CLI's tests configure structlog (a level filter, cached loggers): start from its defaults.
    saved = structlog.get_config()
    structlog.reset_defaults()
    try:
        with capture_logs() as logs:
            monkeypatch.setattr(reporting, "log", structlog.get_logger("topogang"))
            reporter.decision(PlanEvent("default/odd", "planned", 2), 0.001)
    finally:
        structlog.configure(**saved)
    [line] = logs
    assert line["event"] == "gang placed"
    [warning] = line["warnings"]
    assert "kube-scheduler decides where these devices fit" in warning


def test_a_high_priority_gang_preempts_a_running_gang_whose_devices_are_claims() -> None:
    # Both racks full: gang "low" (priority 10) runs on r1, "busy" (priority 10) on r2, each pod
    # with an allocated claim of 8 devices. "urgent" (priority 1000) needs a whole rack.
    scheduler = cluster()
    state = scheduler.state
    state.set_priority_class("low", 10)
    state.set_priority_class("high", 1000)
    for name, rack in (("low", "r1"), ("busy", "r2")):
        state.set_podgroup(f"default/{name}", podgroup({"minMember": 4, "priorityClassName": "low"}, name=name))
        for i, node in enumerate(n for n in NODES if f"-{rack}-" in n):
            made = f"{name}-{i}-gpus"
            held = [(node, f"gpu-{d}") for d in range(8)]
            state.set_dra("ResourceClaim", f"default/{made}", claim(made, exactly(8), allocated=held))
            scheduler.observe_pod(claim_pod(f"{name}-{i}", group=name, generated=made, node_name=node))
    state.set_podgroup(
        "default/urgent", podgroup({"minMember": 4, "priorityClassName": "high", **IN_A_RACK}, name="urgent")
    )
    keys = []
    for i in range(4):
        p = claim_pod(f"urgent-{i}", group="urgent")
        scheduler.observe_pod(p)
        keys.append(p.key)
    event = scheduler.preempt(keys[0], 0.0)
    assert event is not None
    assert event.preemption is not None, event
    assert len(event.preemption.pods) == 4
    assert {state.pods[k].node_name.split("-")[2] for k in event.preemption.pods} in ({"r1"}, {"r2"})  # type: ignore[union-attr]
