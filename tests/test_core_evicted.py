"""The memory of evictions `explain` reads: bounded, newest kept, pods found by name while kept."""

from __future__ import annotations

from extender.core.evicted import PREEMPTED, Evicted, eviction


def test_the_oldest_evictions_are_forgotten_first_with_their_pods() -> None:
    memory = Evicted(limit=2)
    for i in range(3):
        memory.record(eviction(f"ml/g{i}", PREEMPTED, "", [f"ml/g{i}-0", f"ml/g{i}-1"], float(i), by="ml/big"))
    assert memory.workloads() == ["ml/g1", "ml/g2"]
    assert memory.of("ml/g0") is None
    assert memory.of_pod("ml/g0-1") is None
    found = memory.of_pod("ml/g2-1")
    assert found is not None
    assert (found.workload, found.by, found.at) == ("ml/g2", "ml/big", 2.0)
    assert sorted(memory.pods()) == ["ml/g1-0", "ml/g1-1", "ml/g2-0", "ml/g2-1"]


def test_a_workload_evicted_again_keeps_only_its_last_eviction() -> None:
    memory = Evicted(limit=2)
    memory.record(eviction("ml/g", PREEMPTED, "", ["ml/g-0", "ml/g-1"], 1.0))
    memory.record(eviction("ml/h", PREEMPTED, "", ["ml/h-0"], 2.0))
    memory.record(eviction("ml/g", PREEMPTED, "", ["ml/g-2"], 3.0))  # made again, evicted again
    assert memory.workloads() == ["ml/h", "ml/g"]
    assert memory.of_pod("ml/g-0") is None
    found = memory.of_pod("ml/g-2")
    assert found is not None
    assert found.at == 3.0


def test_pod_names_kept_per_eviction_are_bounded() -> None:
    memory = Evicted()
    memory.record(eviction("ml/huge", PREEMPTED, "", [f"ml/huge-{i:05}" for i in range(5000)], 0.0))
    found = memory.of("ml/huge")
    assert found is not None
    assert (found.count, len(found.pods)) == (5000, 1024)
