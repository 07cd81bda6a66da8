"""The move budget and cooldowns across a change of leader: a new leader moves nothing until it has
read back the last hour's moves, then counts them against `--moves-per-hour` and keeps each moved
pod, and the replacement its controller made after the move, in place for the cooldown.

The cluster is test_core_defrag's: the gang `big` needs a whole block and one movable replica of
ReplicaSet `web` (uid rs-uid-web) sits in each block.
"""

from __future__ import annotations

from dataclasses import replace

from extender.core.decisions import R_NOT_LEADER, Released
from extender.core.moves import MoveSettings, PastMove
from extender.placement.victims import NoPreemption, Preemption
from tests.test_core_defrag import NODES, cluster, replica

WALL = 1_800_000_000.0  # the epoch seconds at which the earlier moves were made
GROUP = "default/big"


def test_a_new_leader_moves_nothing_until_the_hours_moves_are_read_back() -> None:
    sched = cluster()
    sched.step_down(Released(R_NOT_LEADER))  # leadership lost, and later taken again
    found = sched.defragmenting.search(GROUP, 0.0)
    assert isinstance(found, NoPreemption)
    assert "not read yet" in found.reason
    first = sched.filter(sched.state.pods["default/big-0"], NODES, 0.0)
    assert first.event is not None
    assert first.event.outcome == "pending"
    assert sched.defragmenting.moves.total == 0
    sched.defragmenting.restore([], 1.0)  # nothing was moved: the search runs again at once
    again = sched.filter(sched.state.pods["default/big-0"], NODES, 1.0)
    assert again.event is not None
    assert again.event.outcome == "defragmenting"


def test_moves_read_back_count_against_the_hour_and_their_age_frees_the_budget() -> None:
    sched = cluster(MoveSettings(per_hour=2))
    now = 5000.0
    past = [PastMove(f"default/gone-{i}", None, now - age, WALL) for i, age in enumerate((100.0, 1000.0, 4000.0))]
    sched.defragmenting.restore(past, now)
    moves = sched.defragmenting.moves
    assert moves.room_left(now) == 0  # two of the three within the hour
    found = sched.defragmenting.search(GROUP, now)
    assert isinstance(found, NoPreemption)
    assert "--moves-per-hour" in found.reason
    assert moves.room_left(now - 1000.0 + 3600.0 + 1) == 1  # the older one left the window
    assert moves.room_left(now - 100.0 + 3600.0 + 1) == 2


def test_a_moved_pod_and_its_controllers_replacement_keep_their_cooldown_after_a_new_leader() -> None:
    sched = cluster()
    now = 100.0
    # web-a was moved 10 s ago by the previous leader (a StatefulSet's pod would come back under
    # its name); its ReplicaSet made web-c after the move; web-b of the same ReplicaSet is older
    sched.observe_pod(replace(replica("web-c", "z1-b2-r2-n1"), created=WALL + 5))
    sched.observe_pod(replace(sched.state.pods["default/web-b"], created=WALL - 600))
    sched.defragmenting.restore([PastMove("default/web-a", "rs-uid-web", now - 10, WALL)], now)
    movable = sched.defragmenting.movable
    assert not movable("default/web-a", now)
    assert not movable("default/web-c", now)  # the replacement
    assert movable("default/web-b", now)  # not made by the move: it may move
    later = now - 10 + MoveSettings().cooldown + 1
    assert movable("default/web-a", later)
    assert movable("default/web-c", later)


def test_restored_moves_leave_the_search_to_the_pods_not_cooling() -> None:
    sched = cluster()
    now = 100.0
    sched.defragmenting.restore([PastMove("default/web-a", None, now - 10, WALL)], now)
    found = sched.defragmenting.search(GROUP, now)
    assert isinstance(found, Preemption), found
    assert list(found.pods) == ["default/web-b"]
