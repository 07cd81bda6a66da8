"""The estimated starts spread over passes: each reservation pass walks at most
`Settings.estimates_per_pass` gangs of the queue, the walk goes on where it stopped at the next
pass, the gangs not yet reached keep their previous estimate, and once the walk is done the
estimates are those of one whole walk.

Cluster: tests/test_core_reserving.py's (8 full nodes of 8 GPUs; b1's pods end at their bound of
60 s, b2's have none). Its gang `big` and seven gangs of 2 pods in one block wait: eight.
"""

from __future__ import annotations

from extender.core.reservations import Settings
from extender.core.scheduler import GangScheduler
from extender.core.waits import Expected
from tests.builders import pod, podgroup
from tests.test_core_reserving import NODES, WALL, setup

SMALL = [f"g{i}" for i in range(7)]
GANGS = ["big", *SMALL]


def waiting(settings: Settings) -> GangScheduler:
    scheduler, _ = setup(settings)
    for name in SMALL:
        block = {"requiredTopologyLevel": "block"}
        spec = {"minMember": 2, "topologyConstraints": {"global": block}}
        scheduler.state.set_podgroup(f"default/{name}", podgroup(spec, name=name))
        first = pod(f"{name}-0", group=name)
        scheduler.observe_pod(first)
        scheduler.observe_pod(pod(f"{name}-1", group=name))
        assert scheduler.filter(first, NODES, 0.0).nodes == []
    return scheduler


def starts(scheduler: GangScheduler) -> dict[str, Expected | None]:
    return {g: scheduler.status(f"default/{g}").expected for g in GANGS}


def test_a_pass_walks_at_most_its_share_and_the_walk_ends_as_one_whole_walk() -> None:
    whole = waiting(Settings(estimates=8, estimates_per_pass=0))
    whole.refresh_reservations(0.0, WALL)
    expected = starts(whole)
    assert all(e is not None for e in expected.values())

    spread = waiting(Settings(estimates=8, estimates_per_pass=3))
    counts = []
    for _ in range(3):
        spread.refresh_reservations(0.0, WALL)
        counts.append(len(spread.reserving.waits.estimates))
    assert counts == [3, 6, 8]
    assert starts(spread) == expected


def test_the_gangs_a_new_walk_has_not_reached_keep_their_previous_estimate() -> None:
    spread = waiting(Settings(estimates=8, estimates_per_pass=3))
    for _ in range(3):
        spread.refresh_reservations(0.0, WALL)
    before = starts(spread)
    spread.refresh_reservations(0.0, WALL)  # a new walk: 3 gangs estimated again, 5 kept
    assert starts(spread) == before
    assert len(spread.reserving.waits.estimates) == 8


def test_an_estimate_read_after_nodes_went_names_the_domain_it_was_made_for() -> None:
    scheduler = waiting(Settings(estimates=8, estimates_per_pass=0))
    scheduler.refresh_reservations(0.0, WALL)
    before = starts(scheduler)
    assert {str(e.domain) for e in before.values() if e is not None} == {"block z1/b1", "block z1/b2"}
    for node in NODES:  # (a status written before the next pass reads the estimates as they are)
        scheduler.state.delete_node(node)
    assert starts(scheduler) == before


def test_a_walk_in_progress_starts_again_when_the_nodes_change() -> None:
    spread = waiting(Settings(estimates=8, estimates_per_pass=3))
    spread.refresh_reservations(0.0, WALL)
    for node in [n for n in NODES if "-b2-" in n]:
        spread.state.delete_node(node)
    for _ in range(3):  # the walk of the old nodes would go on with their indices
        spread.refresh_reservations(0.0, WALL)
    now = starts(spread)
    assert {str(e.domain) for g, e in now.items() if e is not None and not e.never} <= {"block z1/b1"}
