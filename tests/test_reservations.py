"""extender.core.reservations: who gets a reservation, where, what it holds, who may backfill;
and the runtime bound a pod declares (extender.model.runtime_bound).

The cluster here: 2 blocks > 2 racks > 2 nodes of 8 GPUs (levels: 0 cluster, 1 block, 2 rack,
3 node), one resource column (GPUs).
"""

from __future__ import annotations

import numpy as np
import pytest

from extender.core.reservations import (
    Admission,
    Demand,
    Layout,
    Reservation,
    Running,
    Settings,
    Waiting,
    admits,
    expected_end,
    held,
    reserve,
    soonest,
)
from extender.model.errors import InvalidObject
from extender.model.runtime_bound import RUNTIME_BOUND_ANNOTATION, parse_duration, runtime_bound

BLOCK, RACK, NODE = 1, 2, 3


def layout() -> Layout:
    nodes = np.arange(8, dtype=np.int64)
    return Layout([np.zeros(8, dtype=np.int64), nodes // 4, nodes // 2, nodes], np.full((8, 1), 8, dtype=np.int64))


def free(*gpus: int) -> np.ndarray:
    return np.array(gpus, dtype=np.int64)[:, None]


def running(*pods: tuple[int, int, float]) -> Running:
    """(node, GPUs, expected end) per pod."""
    return Running(
        np.array([p[0] for p in pods], dtype=np.int64),
        np.array([[p[1]] for p in pods], dtype=np.int64).reshape(-1, 1),
        np.array([p[2] for p in pods], dtype=np.float64),
    )


def whole_nodes(pods: int, level: int | None = None, part: int = 0) -> Demand:
    return Demand((8,), pods, part, RACK if part else 0, level)


def test_room_counts_whole_pods_and_whole_parts() -> None:
    lay = layout()
    f = free(8, 8, 8, 0, 8, 4, 0, 0)
    assert lay.room(f, whole_nodes(1), BLOCK).tolist() == [3, 1]
    assert lay.room(f, Demand((4,), 1), BLOCK).tolist() == [6, 3]
    # parts of 2 pods in one rack: block 0 has one rack with 2 free nodes, one with 1
    assert lay.room(f, whole_nodes(2, part=2), BLOCK).tolist() == [2, 0]


def test_the_level_is_the_required_one_else_the_finest_that_holds_the_gang() -> None:
    lay = layout()
    assert lay.level_for(whole_nodes(2, level=BLOCK)) == BLOCK
    assert lay.level_for(whole_nodes(1)) == NODE
    assert lay.level_for(whole_nodes(2)) == RACK
    assert lay.level_for(whole_nodes(3)) == BLOCK
    assert lay.level_for(whole_nodes(8)) == 0
    assert lay.level_for(whole_nodes(9)) is None


def test_soonest_takes_the_domain_whose_pods_end_first() -> None:
    lay = layout()
    f = free(0, 0, 0, 0, 0, 0, 0, 0)
    pods = running(*[(n, 8, e) for n, e in zip(range(8), [500, 50, 60, 70, 40, 90, 30, 20], strict=True)]).by_end()
    found = soonest(10.0, whole_nodes(4, level=BLOCK), BLOCK, f, pods, lay, np.ones(2, dtype=np.bool_))
    assert found is not None
    assert (found.domain, found.start) == (1, 90.0)  # block 1's last pod ends at 90; block 0 waits for 500
    only_zero = np.array([True, False])
    found = soonest(10.0, whole_nodes(4, level=BLOCK), BLOCK, f, pods, lay, only_zero)
    assert found is not None
    assert (found.domain, found.start) == (0, 500.0)


def test_a_domain_that_holds_the_gang_now_starts_now_and_nothing_holds_an_impossible_gang() -> None:
    lay = layout()
    empty = running()
    found = soonest(7.0, whole_nodes(2), RACK, free(8, 8, 0, 0, 0, 0, 0, 0), empty, lay, np.ones(4, dtype=np.bool_))
    assert found is not None
    assert (found.domain, found.start) == (0, 7.0)
    assert soonest(7.0, whole_nodes(2), RACK, free(8, 0, 0, 0, 0, 0, 0, 0), empty, lay, np.ones(4, np.bool_)) is None


def test_expected_end_is_the_bound_else_as_long_again_as_it_ran() -> None:
    assert expected_end(100.0, 40.0, 90.0, 600.0) == 130.0
    assert expected_end(200.0, 40.0, 90.0, 600.0) == 200.0  # past its bound: any moment now
    assert expected_end(5000.0, 1000.0, None, 600.0) == 9000.0
    assert expected_end(1100.0, 1000.0, None, 600.0) == 1700.0  # at least the floor


def _busy() -> tuple[np.ndarray, Running]:
    ends = [100, 200, 300, 400, 150, 250, 350, 450]
    return free(0, 0, 0, 0, 0, 0, 0, 0), running(*[(n, 8, float(e)) for n, e in enumerate(ends)])


def test_who_gets_a_reservation_heads_of_each_priority_and_the_long_waiting_up_to_the_limit() -> None:
    lay = layout()
    f, pods = _busy()
    queue = [
        Waiting("hi", 10, 90.0, whole_nodes(2, level=BLOCK)),
        Waiting("old", 0, 0.0, whole_nodes(2, level=BLOCK)),
        Waiting("young", 0, 95.0, whole_nodes(2, level=BLOCK)),
        Waiting("fresh", 0, 99.0, whole_nodes(2, level=BLOCK)),
    ]
    settings = Settings(reserve_after=50.0, limit=4)
    out = reserve(100.0, queue, f, pods, lay, (), settings)
    assert [r.key for r in out] == ["hi", "old"]  # young and fresh have waited < 50 s and are not heads
    assert out[0].domain != out[1].domain  # reservations never share a domain
    assert [r.key for r in reserve(100.0, queue, f, pods, lay, (), Settings(50.0, limit=1))] == ["hi"]
    later = reserve(160.0, queue, f, pods, lay, out, settings)
    assert [r.key for r in later] == ["hi", "old", "young", "fresh"][: len(later)]
    assert len(later) == 2  # two blocks: a third gang has no domain left


def test_a_reservation_keeps_its_domain_until_a_higher_priority_gang_needs_it() -> None:
    lay = layout()
    f, pods = _busy()
    old = Waiting("old", 0, 0.0, whole_nodes(4, level=BLOCK))
    first = reserve(100.0, [old], f, pods, lay, (), Settings(limit=1))
    assert len(first) == 1
    kept = reserve(120.0, [old], f, pods, lay, first, Settings(limit=1))
    assert (kept[0].domain, kept[0].made) == (first[0].domain, 100.0)
    hi = Waiting("hi", 10, 110.0, whole_nodes(4, level=BLOCK))
    taken = reserve(120.0, [hi, old], f, pods, lay, kept, Settings(limit=1))
    assert [r.key for r in taken] == ["hi"]  # the lower-priority reservation is released


def test_largest_first_gives_the_slot_to_the_gang_of_the_coarsest_level() -> None:
    lay = layout()
    f, pods = _busy()
    queue = [
        Waiting("hi", 10, 90.0, whole_nodes(2, level=RACK)),
        Waiting("rack", 0, 0.0, whole_nodes(2)),
        Waiting("block", 0, 50.0, whole_nodes(3)),
    ]
    assert [r.key for r in reserve(100.0, queue, f, pods, lay, (), Settings(limit=1))] == ["hi"]
    (big,) = reserve(100.0, queue, f, pods, lay, (), Settings(40.0, limit=1, largest_first=True))
    assert (big.key, big.level) == ("block", BLOCK)  # waited 50 s; 3 pods need a block, the others a rack
    both = reserve(100.0, queue, f, pods, lay, (), Settings(40.0, limit=2, largest_first=True))
    assert [r.key for r in both] == ["block", "hi"]  # then queue order among equals


def test_held_nodes_are_those_the_gang_waits_for_inside_its_domain() -> None:
    lay = layout()
    f = free(8, 0, 0, 0, 0, 0, 0, 0)
    pods = running(*[(n, 8, float(e)) for n, e in zip(range(1, 8), [100, 900, 900, 900, 900, 900, 900], strict=True)])
    (r,) = reserve(10.0, [Waiting("g", 0, 0.0, whole_nodes(2))], f, pods, lay, (), Settings(limit=1))
    assert (r.level, r.domain, r.start) == (RACK, 0, 100.0)
    assert r.nodes.tolist() == [0, 1]


def test_admission_own_higher_priority_backfill_else_held() -> None:
    r = Reservation("g", 5, BLOCK, 0, np.array([0, 1, 2, 3]), start=1000.0, made=0.0)
    assert admits(r, "g", 0, None) is Admission.OWN
    assert admits(r, "x", 6, None) is Admission.PRIORITY
    assert admits(r, "x", 5, 900.0) is Admission.BACKFILL
    assert admits(r, "x", 5, 1000.0) is Admission.BACKFILL
    assert admits(r, "x", 5, 1001.0) is Admission.HELD  # ends after the estimated start
    assert admits(r, "x", 5, None) is Admission.HELD  # no bound: never backfills
    assert held([r], 8, "x", 5, None).tolist() == [True] * 4 + [False] * 4
    assert not held([r], 8, "x", 9, None).any()


def test_runtime_bound_from_active_deadline_or_the_annotation() -> None:
    assert runtime_bound("Pod a/b", {}) is None
    assert runtime_bound("Pod a/b", {}, 600) == 600.0
    assert runtime_bound("Pod a/b", {RUNTIME_BOUND_ANNOTATION: "2h30m"}) == 9000.0
    assert runtime_bound("Pod a/b", {RUNTIME_BOUND_ANNOTATION: "90m"}, 3600) == 3600.0  # the smaller
    assert parse_duration("1.5h") == 5400.0
    assert parse_duration("45s") == 45.0
    assert parse_duration("3600") == 3600.0
    assert parse_duration("2 hours") is None
    assert parse_duration("h") is None


@pytest.mark.parametrize("value", ["2 hours", "", "-5m", "0", "1d"])
def test_a_malformed_runtime_bound_names_the_annotation_and_what_was_expected(value: str) -> None:
    with pytest.raises(InvalidObject) as err:
        runtime_bound("Pod ml/w-0", {RUNTIME_BOUND_ANNOTATION: value})
    text = str(err.value)
    assert f"Pod ml/w-0: metadata.annotations[{RUNTIME_BOUND_ANNOTATION}]: {value!r}" in text
    assert "expected a positive duration such as 90m, 2h30m or 3600 (seconds)" in text


def test_a_bad_active_deadline_is_named() -> None:
    with pytest.raises(
        InvalidObject, match=r"Pod ml/w-0: spec.activeDeadlineSeconds: 'soon' is not a positive integer"
    ):
        runtime_bound("Pod ml/w-0", {}, "soon")


def test_a_reservation_moves_only_to_a_domain_expected_to_free_clearly_sooner() -> None:
    lay = layout()
    gang = Waiting("g", 0, 0.0, whole_nodes(4, level=BLOCK))
    old = Reservation("g", 0, BLOCK, 0, lay.members(BLOCK, 0), start=300.0, made=50.0)
    # block 0's last pod now outlives its estimate (ends at 5,000); block 1 frees at 1,000
    late = running(*[(n, 8, 5000.0 if n == 0 else 1000.0) for n in range(8)])
    f = free(0, 0, 0, 0, 0, 0, 0, 0)
    (moved,) = reserve(200.0, [gang], f, late, lay, [old], Settings(limit=1))
    assert (moved.domain, moved.start, moved.made) == (1, 1000.0, 50.0)
    (stays,) = reserve(200.0, [gang], f, late, lay, [old], Settings(limit=1, move=False))
    assert (stays.domain, stays.start) == (0, 5000.0)
    close = running(*[(n, 8, 1100.0 if n == 0 else 1000.0) for n in range(8)])
    (kept,) = reserve(200.0, [gang], f, close, lay, [old], Settings(limit=1))
    assert kept.domain == 0  # 100 s sooner is within the margin: no move


def test_coarsest_only_leaves_gangs_that_fit_a_finer_domain_without_a_reservation() -> None:
    lay = layout()
    f, pods = _busy()
    queue = [Waiting("rack-sized", 0, 0.0, whole_nodes(2)), Waiting("block-sized", 0, 10.0, whole_nodes(3))]
    assert [r.key for r in reserve(100.0, queue, f, pods, lay, (), Settings(limit=1))] == ["rack-sized"]
    only = reserve(100.0, queue, f, pods, lay, (), Settings(limit=1, coarsest_only=BLOCK))
    assert [(r.key, r.level) for r in only] == [("block-sized", BLOCK)]  # the head among the block-sized


def test_with_children_a_reservation_holds_the_fewest_children_that_hold_the_gang_at_its_start() -> None:
    lay = layout()
    # block 0's racks free at 100 and 900, block 1's both at 200
    ends = [100, 100, 900, 900, 200, 200, 200, 200]
    f, pods = free(*[0] * 8), running(*[(n, 8, float(e)) for n, e in enumerate(ends)])
    gang = Waiting("g", 0, 0.0, whole_nodes(4, level=0))  # four nodes anywhere in the cluster
    (whole,) = reserve(10.0, [gang], f, pods, lay, (), Settings(limit=1, children=False))
    (some,) = reserve(10.0, [gang], f, pods, lay, (), Settings(limit=1, children=True))
    assert whole.start == some.start == 200.0
    assert whole.nodes.tolist() == list(range(8))
    assert some.nodes.tolist() == [4, 5, 6, 7]  # block 1 holds it alone: block 0 stays usable
    block_gang = Waiting("b", 0, 0.0, whole_nodes(2, level=BLOCK))
    (r,) = reserve(10.0, [block_gang], f, pods, lay, (), Settings(limit=1, children=True))
    assert (r.domain, r.start) == (0, 100.0)
    assert r.nodes.tolist() == [0, 1]  # rack 0 frees at 100; rack 1 (busy until 900) stays usable


def test_an_overdue_gang_takes_the_slot_before_higher_priorities_the_longest_overdue_first() -> None:
    lay = layout()
    f, pods = _busy()
    hi = Waiting("hi", 1000, 90.0, whole_nodes(4, level=BLOCK))
    low = Waiting("low", 0, 0.0, whole_nodes(4, level=BLOCK), max_wait=60.0)  # overdue at 60
    later = Waiting("later", 0, 10.0, whole_nodes(4, level=BLOCK), max_wait=30.0)  # overdue at 40
    off = Settings(limit=1)
    assert [r.key for r in reserve(50.0, [hi, low, later], f, pods, lay, (), off)] == ["later"]
    (r,) = reserve(100.0, [hi, low, later], f, pods, lay, (), off)
    assert (r.key, r.overdue) == ("later", 40.0)  # overdue since 40, before low (60)
    two = reserve(100.0, [hi, low, later], f, pods, lay, (), Settings(limit=2))
    assert [(r.key, r.overdue) for r in two] == [("later", 40.0), ("low", 60.0)]
    # Without any maximum, strict priority order: the higher priority holds the slot.
    assert [r.key for r in reserve(100.0, [hi, Waiting("low", 0, 0.0, low.demand)], f, pods, lay, (), off)] == ["hi"]
    # The cluster default applies to gangs that declare none; their own maximum wins.
    plain = [hi, Waiting("low", 0, 0.0, low.demand)]
    (d,) = reserve(100.0, plain, f, pods, lay, (), Settings(limit=1, max_wait=90.0))
    assert (d.key, d.overdue) == ("low", 90.0)
    assert reserve(100.0, [hi, low], f, pods, lay, (), Settings(limit=1, max_wait=5.0))[0].overdue == 60.0


def test_room_held_for_an_overdue_gang_is_kept_from_higher_priorities_that_are_not_overdue() -> None:
    r = Reservation("g", 0, BLOCK, 0, np.array([0, 1]), start=500.0, made=0.0, overdue=60.0)
    assert admits(r, "hi", 1000, None) is Admission.HELD
    assert admits(r, "hi", 1000, None, overdue=True) is Admission.PRIORITY  # overdue too: competes as one
    assert admits(r, "lo", 0, None, overdue=True) is Admission.HELD
    assert admits(r, "short", 1000, 400.0) is Admission.BACKFILL  # ends before the estimated start
    assert admits(r, "g", 0, None) is Admission.OWN
    calm = Reservation("g", 0, BLOCK, 0, np.array([0, 1]), start=500.0, made=0.0)
    assert admits(calm, "hi", 1000, None) is Admission.PRIORITY
    assert held([r], 8, "hi", 1000, None).tolist() == [True, True] + [False] * 6
    assert not held([r], 8, "hi", 1000, None, overdue=True).any()


def test_an_overdue_gang_holds_room_whatever_the_reservation_level_says() -> None:
    lay = layout()
    f, pods = _busy()
    cut = Settings(limit=1, coarsest_only=BLOCK, heads=False, reserve_after=50.0)
    assert reserve(100.0, [Waiting("small", 0, 0.0, whole_nodes(2, level=RACK))], f, pods, lay, (), cut) == ()
    small = Waiting("small", 0, 0.0, whole_nodes(2, level=RACK), max_wait=30.0)
    (r,) = reserve(100.0, [small], f, pods, lay, (), cut)
    assert (r.key, r.level, r.overdue) == ("small", RACK, 30.0)


def test_a_gang_is_held_room_only_on_nodes_it_may_use() -> None:
    """Block 0 frees first (ends 100-400, block 1's 150-450), but the gang may use only one node
    of each of block 0's racks (a taint, a selector): 2 of the 3 pods it needs. Its room is in
    block 1, and when it may use no block's three nodes it is held none."""
    lay = layout()
    f, pods = _busy()
    usable = np.array([True, False, True, False, True, True, True, True])
    gang = Waiting("g", 0, 0.0, whole_nodes(3, level=BLOCK), usable=usable)
    (r,) = reserve(0.0, [gang], f, pods, lay, (), Settings())
    assert (r.domain, r.start) == (1, 350.0)  # block 1's third pod to end frees its third node
    assert set(r.nodes.tolist()) <= {4, 5, 6, 7}
    nowhere = np.array([True, False, True, False, True, False, True, False])
    assert (
        reserve(0.0, [Waiting("g", 0, 0.0, whole_nodes(3, level=BLOCK), usable=nowhere)], f, pods, lay, (), Settings())
        == ()
    )
