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
