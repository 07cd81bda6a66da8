"""Reservations in the core: a gang that waits holds the block expected to free first, room
there is kept from work that would outlast its estimated start, and let go when it starts.

Cluster: 2 blocks (b1, b2) of 2 racks of 2 nodes, 8 GPUs each, every node full with one plain
pod of 8 GPUs. The pods on b1 declare a runtime bound of 60 s; those on b2 none (expected to run
at least `floor`, 1,800 s by default, longer). The gang: 4 pods of 8 GPUs required in one block.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from extender.core.apply import apply_object
from extender.core.cluster import ClusterState
from extender.core.explain import explain, render
from extender.core.queues import KAI_QUEUE
from extender.core.reservations import Settings, expected_end
from extender.core.scheduler import GangScheduler
from extender.model.pod import PodInfo, parse_pod
from tests.builders import GPU, TOPO, grid, node, pod, podgroup

NODES = [n.name for n in grid(blocks=2, racks=2, nodes=2)]
WALL = 1_000_000.0  # the wall clock when the scheduler's own clock reads 0


ON = Settings()


def setup(settings: Settings | None = ON, level: str | None = None) -> tuple[GangScheduler, list[str]]:
    state = ClusterState()
    for n in grid(blocks=2, racks=2, nodes=2):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    big = podgroup({"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "block"}}}, name="big")
    state.set_podgroup("default/big", big)
    scheduler = GangScheduler(state, reservations=settings, reserve_level=level)
    for n in NODES:
        bound = {"activeDeadlineSeconds": 60} if "-b1-" in n else {}
        scheduler.observe_pod(pod(f"run-{n}", node_name=n, spec=bound))
    keys = []
    for i in range(4):
        p = pod(f"big-{i}", group="big")
        scheduler.observe_pod(p)
        keys.append(p.key)
    return scheduler, keys


def plain(name: str, **spec: Any) -> PodInfo:
    return pod(name, spec=spec)


def waiting_with_room_held(scheduler: GangScheduler, keys: list[str]) -> None:
    refused = scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    assert refused.nodes == []
    made, released = scheduler.refresh_reservations(0.0, WALL)
    assert (made, released) == (["default/big"], [])


def free_b1_node(scheduler: GangScheduler) -> str:
    node = "z1-b1-r1-n1"
    scheduler.delete_pod(f"default/run-{node}")
    return node


def test_a_waiting_gang_holds_the_block_expected_to_free_first() -> None:
    scheduler, keys = setup()
    waiting_with_room_held(scheduler, keys)
    room = scheduler.reserving.of("default/big")
    assert room is not None
    assert str(room.domain) == "block z1/b1"  # its pods end within 60 s; b2's are expected to run 1,800 s more
    assert room.nodes == 4
    assert room.start == WALL + 60
    status = scheduler.status("default/big")
    assert status.reservation == room
    assert "room held for it in block z1/b1 (4 nodes)" in status.message
    assert "expected to start by 1970-01-12T13:47:40Z" in status.message


def test_room_a_plan_holds_before_its_pods_bind_frees_as_work_that_starts_now() -> None:
    scheduler, keys = setup()
    node = free_b1_node(scheduler)
    # A gang planned on the freed node, its pod not bound yet: bounded at 60 s, it frees by WALL + 60,
    # as b1's running pods do. Counted as taken for good, b1 would never hold big, and the pass
    # would hold b2 (expected to free at WALL + 1,800) or, with every block so held, nothing.
    scheduler.state.set_podgroup("default/soon", podgroup({"minMember": 1}, name="soon"))
    soon = pod("soon-0", group="soon", spec={"activeDeadlineSeconds": 60})
    scheduler.observe_pod(soon)
    assert scheduler.filter(soon, NODES, 0.0).nodes == [node]
    waiting_with_room_held(scheduler, keys)
    room = scheduler.reserving.of("default/big")
    assert room is not None
    assert str(room.domain) == "block z1/b1"
    assert room.start == WALL + 60


def test_room_a_preemptor_holds_where_its_victims_run_is_not_free_when_the_victims_end() -> None:
    scheduler, keys = setup()
    # Each b1 node: its running pod ends at its bound (60 s), and a preemptor's 8 GPUs are reserved
    # there already (a nomination); the preemptors run on after, expected for 1,800 s. b1 holds big
    # only then, as b2 does: not at 60 s, and never as if each node had 16 GPUs.
    for n in [n for n in NODES if "-b1-" in n]:
        scheduler.state.reserve(f"default/preemptor-{n}", n, {GPU: 8000, "cpu": 1000, "pods": 1000})
    waiting_with_room_held(scheduler, keys)
    room = scheduler.reserving.of("default/big")
    assert room is not None
    assert room.start == WALL + 1800


def test_held_room_is_kept_from_work_that_would_outlast_the_estimated_start() -> None:
    scheduler, keys = setup()
    waiting_with_room_held(scheduler, keys)
    node = free_b1_node(scheduler)
    unbounded = scheduler.filter(plain("web"), NODES, 1.0)
    assert node not in unbounded.nodes
    assert unbounded.unresolvable[node].startswith("topogang: room held for a waiting gang")
    too_long = scheduler.filter(plain("long", activeDeadlineSeconds=600), NODES, 1.0)
    assert node not in too_long.nodes


def test_bounded_work_that_ends_before_the_estimated_start_backfills_held_room() -> None:
    scheduler, keys = setup()
    waiting_with_room_held(scheduler, keys)
    node = free_b1_node(scheduler)
    # Asked at 1 s for at most 30 s: it ends at WALL + 31, before the gang's start at WALL + 60.
    assert node in scheduler.filter(plain("short", activeDeadlineSeconds=30), NODES, 1.0).nodes
    annotated = replace(pod("notes"), annotations={"scheduling.topogang.io/runtime-bound": "30s"}, runtime_bound=30.0)
    assert node in scheduler.filter(annotated, NODES, 1.0).nodes


def test_higher_priority_work_is_never_held_out() -> None:
    scheduler, keys = setup()
    waiting_with_room_held(scheduler, keys)
    node = free_b1_node(scheduler)
    assert node in scheduler.filter(plain("urgent", priority=1000), NODES, 1.0).nodes


def test_another_gang_is_held_out_and_told_why() -> None:
    scheduler, keys = setup()
    waiting_with_room_held(scheduler, keys)
    free_b1_node(scheduler)
    scheduler.state.set_podgroup("default/small", podgroup({"minMember": 1}, name="small"))
    small = pod("small-0", group="small")
    scheduler.observe_pod(small)
    result = scheduler.filter(small, NODES, 1.0)
    assert result.nodes == []
    assert "nodes left out: 4 held for another gang" in scheduler.reasons.text("default/small")


def _first_reserved(settings: Settings, level: str | None = None) -> list[str]:
    """Gang big (4 pods, a block) and gang a (2 pods, a rack; first in queue order) both wait."""
    scheduler, keys = setup(settings, level)
    scheduler.state.set_podgroup(
        "default/a",
        podgroup({"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}, name="a"),
    )
    pair = [pod(f"a-{i}", group="a") for i in range(2)]
    for p in pair:
        scheduler.observe_pod(p)
    for p in (pair[0], scheduler.state.pods[keys[0]]):
        assert scheduler.filter(p, NODES, 0.0).nodes == []
    made, _ = scheduler.refresh_reservations(0.0, WALL)
    return made


def test_largest_first_gives_the_one_reservation_to_the_gang_of_the_coarsest_level() -> None:
    assert _first_reserved(replace(ON, reserve_after=0.0)) == ["default/a"]
    assert _first_reserved(replace(ON, reserve_after=0.0, largest_first=True)) == ["default/big"]


def test_a_reserve_level_keeps_reservations_for_gangs_of_that_level_or_coarser() -> None:
    two = replace(ON, reserve_after=0.0, limit=2)
    assert _first_reserved(two) == ["default/a", "default/big"]
    assert _first_reserved(two, "block") == ["default/big"]  # a needs only a rack
    assert _first_reserved(two, "zone") == []  # big needs only a block
    assert _first_reserved(two, "rack") == ["default/a", "default/big"]
    # a Topology without the level: any gang, as without one
    assert _first_reserved(two, "example.com/island") == ["default/a", "default/big"]


def test_without_reservations_the_freed_room_goes_to_whoever_asks() -> None:
    scheduler, keys = setup(settings=None)
    refused = scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    assert refused.nodes == []
    assert scheduler.refresh_reservations(0.0, WALL) == ([], [])
    node = free_b1_node(scheduler)
    assert node in scheduler.filter(plain("web"), NODES, 1.0).nodes


def test_the_room_is_let_go_when_the_gang_is_planned() -> None:
    scheduler, keys = setup()
    waiting_with_room_held(scheduler, keys)
    for n in NODES:
        if "-b1-" in n:
            scheduler.delete_pod(f"default/run-{n}")
    result = scheduler.filter(scheduler.state.pods[keys[0]], NODES, 2.0)
    assert result.event is not None
    assert result.event.outcome == "planned"
    assert scheduler.reserving.of("default/big") is None
    assert scheduler.reserving.take_freed()
    assert scheduler.status("default/big").reservation is None
    assert scheduler.refresh_reservations(3.0, WALL + 3) == ([], [])


def test_a_gang_deleted_while_it_holds_room_lets_it_go_at_the_sweep() -> None:
    scheduler, keys = setup()
    waiting_with_room_held(scheduler, keys)
    for k in keys:
        scheduler.delete_pod(k)
    scheduler.state.set_podgroup("default/big", None)
    scheduler.expire(5.0)
    assert scheduler.reserving.of("default/big") is None
    assert scheduler.refresh_reservations(5.0, WALL + 5) == ([], [])
    node = free_b1_node(scheduler)
    assert node in scheduler.filter(plain("web"), NODES, 6.0).nodes


def test_a_malformed_runtime_bound_costs_the_pod_its_backfill_and_is_said() -> None:
    parsed = parse_pod(
        {
            "metadata": {"name": "p", "annotations": {"scheduling.topogang.io/runtime-bound": "soon"}},
            "spec": {"containers": []},
        }
    )
    assert parsed.runtime_bound is None
    assert "runtime-bound]: 'soon': expected a positive duration" in parsed.runtime_bound_error


def test_explain_shows_the_room_held() -> None:
    scheduler, keys = setup()
    waiting_with_room_held(scheduler, keys)
    found = explain(scheduler, "default/big")
    assert found.reservation.startswith("room held for it in block z1/b1 (4 nodes)")
    assert "  Reservation: room held for it in block z1/b1" in render([found])


def test_explain_says_why_a_gang_below_the_reserve_level_holds_no_room() -> None:
    scheduler, keys = setup(replace(ON, limit=2), level="zone")
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0).nodes == []
    assert scheduler.refresh_reservations(0.0, WALL) == ([], [])
    found = explain(scheduler, "default/big")  # it needs a block
    assert found.reservation == (
        "none: only gangs that need a domain of level zone or coarser may hold room (--reserve-level)"
    )


def test_explain_on_a_live_cluster_reads_the_room_the_leader_wrote() -> None:
    scheduler = GangScheduler(ClusterState())
    held = {
        "domain": "block z1/b1",
        "nodes": 4,
        "since": "2026-11-25T23:00:00Z",
        "estimatedStart": "2026-11-25T23:40:00Z",
    }
    body = {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "big", "namespace": "default"},
        "spec": {"minMember": 4},
        "status": {"reservation": held},
    }
    apply_object(scheduler, body)
    assert scheduler.reserving.text("default/big") == (
        "room held for it in block z1/b1; expected to start by 2026-11-25T23:40:00Z"
    )
    apply_object(scheduler, {**body, "status": {}})  # let go: the leader removed it
    assert scheduler.reserving.text("default/big") == ""


def test_the_running_arrays_expect_each_pod_to_end_as_expected_end_says() -> None:
    scheduler, _ = setup()
    state = scheduler.state
    for i, n in enumerate(NODES[:3]):  # started 100 s ago; bounds 50 s (overdue), 300 s, none
        spec = {"activeDeadlineSeconds": (50, 300)[i]} if i < 2 else {}
        body = pod(f"t-{i}", gpus=0, node_name=n, spec=spec)
        scheduler.observe_pod(replace(body, started=WALL - 100))
    running = scheduler.reserving._running(WALL, ["cpu"])
    index = state.table.index
    floor = ON.floor  # the default floor of an unbounded pod's expected end
    ends = {(int(node), float(end)) for node, end in zip(running.node, running.end, strict=True) if end <= WALL + floor}
    expected = {
        (index[NODES[0]], expected_end(WALL, WALL - 100, 50, floor)),
        (index[NODES[1]], expected_end(WALL, WALL - 100, 300, floor)),
        (index[NODES[2]], expected_end(WALL, WALL - 100, None, floor, ON.stretch)),
    }
    assert expected <= ends
    assert expected_end(WALL, WALL - 100, 50, 600) == WALL  # overdue: any moment now


def test_a_gang_its_queue_holds_back_holds_no_room() -> None:
    scheduler, keys = setup()
    spec = {"minMember": 4, "queue": "missing", "topologyConstraints": {"global": {"requiredTopologyLevel": "block"}}}
    scheduler.state.set_podgroup("default/big", podgroup(spec, name="big"))
    scheduler.state.set_queue_api(KAI_QUEUE, True)
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0).nodes == []
    assert scheduler.refresh_reservations(0.0, WALL) == ([], [])
    assert scheduler.reserving.of("default/big") is None


def test_the_sweep_finds_a_gang_kube_scheduler_never_asked_about() -> None:
    # A full cluster: kube-scheduler's own filters refuse every node and never call topogang.
    scheduler, _ = setup()
    made, _ = scheduler.refresh_reservations(0.0, WALL)
    assert made == ["default/big"]
    assert "default/big" in scheduler.reserving.told
    assert "the best block fits 0" in scheduler.reasons.text("default/big")


def test_a_gang_waits_reserve_after_from_when_it_queued_even_before_the_first_pass() -> None:
    """Its pods carry no creation time, and no pass has told the scheduler the wall clock yet when
    it queues: it has waited from then (the callers' clock made a wall-clock time at the pass), not
    since the epoch, which would make it the oldest gang and eligible at once."""
    scheduler, keys = setup(replace(ON, heads=False))
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0).nodes == []
    assert scheduler.refresh_reservations(0.0, WALL) == ([], [])  # waited 0 s of the 1,800
    assert scheduler.refresh_reservations(1800.0, WALL + 1800) == (["default/big"], [])


def test_a_gang_whose_nodes_lack_its_level_label_holds_no_room() -> None:
    """No node carries the rack label: no rack can ever hold the gang, so no room is held for it
    (nodes without a label sit in an unlabeled domain, never reserved for that level)."""
    state = ClusterState()
    for name in ("n1", "n2"):
        state.upsert_node(node(name, rack=None))
    state.set_topology("default", TOPO)
    spec = {"minMember": 2, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    state.set_podgroup("default/g", podgroup(spec, name="g"))
    scheduler = GangScheduler(state, reservations=ON)
    members = [pod(f"g-{i}", group="g") for i in range(2)]
    for p in members:
        scheduler.observe_pod(p)
    assert scheduler.filter(members[0], ["n1", "n2"], 0.0).nodes == []
    assert not scheduler.reserving.is_queued("default/g")  # it waits for nothing
    assert scheduler.refresh_reservations(0.0, WALL) == ([], [])
    assert scheduler.reserving.of("default/g") is None
    assert scheduler.status("default/g").message == (
        "PodGroup default/g: 2 pods x {cpu: 1, nvidia.com/gpu: 8} in one rack; no node has label"
        " example.com/topology-rack"
    )


def test_without_a_wall_clock_the_room_held_names_no_date() -> None:
    scheduler, keys = setup()
    assert scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0).nodes == []
    assert scheduler.refresh_reservations(0.0, None) == (["default/big"], [])
    room = scheduler.reserving.of("default/big")
    assert room is not None
    assert (room.start, room.made, room.after) == (None, None, 60.0)
    assert room.render() == (
        "room held for it in block z1/b1 (4 nodes), since a moment not known (no wall clock); expected to start 1m0s"
        " after the last reservation pass"
    )
