"""The recorder of explained plans: what it keeps of a ranking, whatever the chosen domain's index."""

from __future__ import annotations

import numpy as np

from extender.placement import ClusterSnapshot
from extender.placement.gang import Scope
from extender.placement.ranking import HOLDS_ALL, PATH, REQUIRED, ROOM, Recorder
from extender.placement.state import Pin
from extender.placement.tree import Domain
from tests.builders import TOPO, node

RACK_LEVEL = 3


def test_the_chosen_domain_and_its_runner_up_are_kept_however_far_down_they_rank() -> None:
    """Racks r0..r7; r1..r6 ranked first and tried in vain, r0 (domain index 0) chosen 7th."""
    nodes = [node(f"n{i}", rack=f"r{i}") for i in range(8)]
    tree = ClusterSnapshot.of(nodes).table.tree(TOPO)
    scope = Scope(0, "PodGroup default/g", 1, key="default/g")
    recorder = Recorder(tree, ["{nvidia.com/gpu: 8}"])
    order = np.array([1, 2, 3, 4, 5, 6, 0, 7], dtype=np.int64)
    columns = {HOLDS_ALL: np.ones(8, dtype=np.bool_), ROOM: np.ones(8, dtype=np.int64)}
    recorder.ranked(
        scope, REQUIRED, (tree.root, RACK_LEVEL), (8, 8), order, columns, (HOLDS_ALL, ROOM, PATH), (1, 1, 0)
    )
    for i in (1, 2, 3, 4, 5, 6):
        recorder.tried(scope, REQUIRED, Domain(RACK_LEVEL, i), held=False)
    recorder.tried(scope, REQUIRED, Domain(RACK_LEVEL, 0), held=True)
    (ranking,) = recorder.rankings({0: Pin(Domain(RACK_LEVEL, 0), Domain(RACK_LEVEL, 0))})
    assert str(ranking.chosen) == "rack z1/b1/r0"
    assert ranking.chosen_rank == 6
    assert [str(c.domain) for c in ranking.candidates] == [
        "rack z1/b1/r1", "rack z1/b1/r2", "rack z1/b1/r3", "rack z1/b1/r4", "rack z1/b1/r5", "rack z1/b1/r0",
        "rack z1/b1/r7",
    ]  # fmt: skip
    assert [str(d) for d in ranking.tried] == [f"rack z1/b1/r{i}" for i in range(1, 7)]


def test_a_ranking_the_final_placement_does_not_agree_with_is_left_out() -> None:
    """The search backtracked: the scope stands elsewhere (or nowhere) now."""
    nodes = [node(f"n{i}", rack=f"r{i}") for i in range(2)]
    tree = ClusterSnapshot.of(nodes).table.tree(TOPO)
    scope = Scope(0, "PodGroup default/g", 1, key="default/g")
    recorder = Recorder(tree, ["{}"])
    order = np.array([0, 1], dtype=np.int64)
    recorder.ranked(scope, REQUIRED, (tree.root, RACK_LEVEL), (2, 2), order, {}, (PATH,), (1, 1, 0))
    recorder.tried(scope, REQUIRED, Domain(RACK_LEVEL, 0), held=True)
    assert recorder.rankings({0: Pin(Domain(RACK_LEVEL, 1), Domain(RACK_LEVEL, 1))}) == ()
    assert recorder.rankings({}) == ()
