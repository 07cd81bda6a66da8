"""extender.core.estimates: the walk that gives every waiting gang an estimated start.

The cluster: 2 blocks > 2 racks > 2 nodes of 8 GPUs (levels: 0 cluster, 1 block, 2 rack, 3
node), every node busy with one 8-GPU pod:

    block 0: nodes 0-3, their pods end at 100, 200, 300, 400
    block 1: nodes 4-7, their pods end at 150, 250, 350, 450
"""

from __future__ import annotations

import numpy as np

from extender.core.estimates import Estimate, Walk
from extender.core.lifetimes import Lifetimes
from extender.core.reservations import NEVER, Demand, Layout, Reservation, Running, Settings, Waiting, soonest

BLOCK, RACK = 1, 2
ENDS = [100.0, 200.0, 300.0, 400.0, 150.0, 250.0, 350.0, 450.0]
SETTINGS = Settings(floor=1800.0)


def layout() -> Layout:
    nodes = np.arange(8, dtype=np.int64)
    return Layout([np.zeros(8, dtype=np.int64), nodes // 4, nodes // 2, nodes], np.full((8, 1), 8, dtype=np.int64))


def busy() -> tuple[np.ndarray, Running]:
    pods = Running(np.arange(8, dtype=np.int64), np.full((8, 1), 8, dtype=np.int64), np.array(ENDS))
    return np.zeros((8, 1), dtype=np.int64), pods


def gang(key: str, pods: int, level: int | None = None, part: int = 0) -> Waiting:
    return Waiting(key, 0, 0.0, Demand((8,), pods, part, RACK if part else 0, level))


def walk(
    order: list[Waiting],
    runs: dict[str, float] | None = None,
    known: list[bool] | None = None,
    reservations: tuple[Reservation, ...] = (),
    limit: int = 10,
) -> list[Estimate]:
    f, pods = busy()
    mask = np.array(known or [False] * 8, dtype=np.bool_)
    return Walk(0.0, order, f, pods, mask, layout(), reservations, runs or {}, SETTINGS).step(limit)


def test_each_gang_starts_when_its_domain_frees_after_the_gangs_ahead_took_theirs() -> None:
    a, b, c = gang("a", 4, BLOCK), gang("b", 4, BLOCK), gang("c", 4, BLOCK)
    out = walk([a, b, c], runs={"a": 1000.0})
    assert [(e.key, e.position, e.start, e.domain) for e in out] == [
        ("a", 1, 400.0, 0),  # block 0 frees at 400, block 1 at 450
        ("b", 2, 450.0, 1),  # block 0 is a's from then on
        ("c", 3, 1400.0, 0),  # a runs its bound (1,000 s); b has none: 450 + 1,800 s
    ]
    assert (out[0].waits_for, out[0].ahead) == (4, 0)
    assert (out[2].waits_for, out[2].ahead) == (8, 4)  # block 0's four pods, then a's four


def test_a_gang_behind_starts_first_where_room_the_gangs_ahead_do_not_take_frees() -> None:
    out = walk([gang("big", 4, BLOCK), gang("one", 1)])
    assert [(e.key, e.start, e.domain) for e in out] == [("big", 400.0, 0), ("one", 150.0, 4)]


def test_it_counts_the_ends_it_waits_for_by_what_they_rest_on() -> None:
    (e,) = walk([gang("a", 4, BLOCK)], known=[True, True, False, False, False, False, False, False])
    assert (e.start, e.waits_for, e.bounded, e.ahead) == (400.0, 4, 2, 0)


def test_a_gang_in_parts_takes_whole_parts_where_they_fit() -> None:
    # Two parts of 2 pods, each in one rack, in one block: block 0's two racks at 400. The next
    # gang (2 pods in a rack) finds rack 2 (nodes 4, 5) free at 250, and rack 0 taken.
    out = walk([gang("seg", 4, BLOCK, part=2), gang("next", 2, RACK), gang("then", 2, RACK)])
    assert [(e.start, e.domain) for e in out] == [(400.0, 0), (250.0, 2), (450.0, 3)]


def test_a_reserved_gang_is_estimated_in_its_domain_and_the_walk_is_bounded() -> None:
    held = Reservation("a", 0, BLOCK, 1, np.arange(4, 8), start=450.0, made=0.0)
    out = walk([gang("a", 4, BLOCK), gang("b", 4, BLOCK), gang("c", 4, BLOCK)], reservations=(held,), limit=2)
    assert [(e.key, e.start, e.domain) for e in out] == [("a", 450.0, 1), ("b", 400.0, 0)]


def test_a_gang_no_domain_holds_even_empty_has_no_start() -> None:
    (e,) = walk([gang("huge", 9)])
    assert e.start == NEVER


def test_run_times_learnt_expect_the_median_of_the_longer_runs_seen_else_the_rule() -> None:
    life = Lifetimes(least=4)
    started, rule = np.array([0.0, 0.0, 0.0]), np.array([1000.0, 1000.0, 1000.0])
    # Too few run times seen: the pass's rule, untouched.
    assert life.ends(50.0, ["Job", "Job", "Job"], started, rule).tolist() == [1000.0] * 3
    for seconds in (10.0, 20.0, 100.0, 200.0, 400.0):
        life.observe("Job", seconds)
    assert life.run("Job") == 100.0
    assert life.run("JobSet") is None
    ends = life.ends(50.0, ["Job", "JobSet", "Job"], np.array([45.0, 0.0, -350.0]), rule)
    # 5 s old: the median of all five (100); another kind: the rule; 400 s old: older than all but
    # one run (400 is not longer): the rule again.
    assert ends.tolist() == [145.0, 1000.0, 1000.0]
    assert life.ends(50.0, ["Job"], np.array([-100.0]), np.array([1000.0])).tolist() == [300.0]  # 150 s old: 200, 400


def test_for_the_first_gang_the_walk_answers_as_the_reservation_pass_does() -> None:
    """The walk's search (each bisection step adding only the releases between its bounds) gives
    `soonest`'s domain and start, on random busy clusters."""
    rng = np.random.default_rng(7)
    lay = layout()
    for _ in range(200):
        free = rng.integers(0, 9, size=(8, 1)).astype(np.int64)
        count = int(rng.integers(0, 12))
        pods = Running(
            rng.integers(0, 8, size=count).astype(np.int64),
            rng.integers(1, 9, size=(count, 1)).astype(np.int64),
            np.sort(rng.uniform(0, 1000, size=count)),
        )
        demand = Demand((int(rng.integers(1, 9)),), int(rng.integers(1, 9)), 0, 0, int(rng.choice([BLOCK, RACK, 3])))
        level = lay.level_for(demand)
        assert level is not None
        want = soonest(0.0, demand, level, free, pods.by_end(), lay, lay.labeled[level])
        walk = Walk(0.0, [Waiting("g", 0, 0.0, demand)], free, pods, np.zeros(count, np.bool_), lay, (), {}, SETTINGS)
        (got,) = walk.step(1)
        assert (got.start, got.domain) == ((NEVER, None) if want is None else (want.start, want.domain))
