"""Segments and slices: parts of a gang that each need one domain of a finer level.

- an elastic segment (beyond the minimum) is placed whole inside its domain or not at all;
- a domain that holds every pod of the gang in whole segments ranks before one that holds only
  its minimum, though both have the free nodes;
- siblings that ask for the same take the fewest domains of their level (Kueue's greedy: the
  most room first, the last the tightest), and over random clusters never more than that greedy,
  never a slice broken.

Clusters are drawn where they are built; `free` lists each node's free GPUs (8 a node).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.cli import main
from extender.model.node import NodeInfo
from extender.model.pod import PodInfo
from extender.model.podgroup import PodGroupSpec
from extender.placement import ClusterSnapshot, Plan, build_gang, plan
from extender.placement.parts import fewest_domains
from tests.builders import BLOCK, GPU, RACK, TOPO, ZONE, grid, node, placed, pod, podgroup, racks_of, run

ROOT = Path(__file__).resolve().parents[1]


def used_gpus(free: dict[str, int]) -> dict[str, dict[str, int]]:
    """Usage that leaves each named node FREE[name] of its 8 GPUs."""
    return {n: {GPU: (8 - f) * 1000} for n, f in free.items() if f < 8}


def segmented(
    sizes: list[int], minimum: int, level: str, launcher: bool = False, gpus: int = 8, held: str | None = None
) -> tuple[PodGroupSpec, list[PodInfo]]:
    """Part w in segments w-k of SIZES pods (the first MINIMUM mandatory, the rest elastic and
    whole, as the grouper makes them), each required in one domain of LEVEL; a launcher; the
    whole gang required in one domain of HELD."""
    subgroups: list[dict[str, Any]] = [{"name": "w", "minSubGroup": len(sizes)}]
    pods = []
    for k, size in enumerate(sizes):
        subgroups.append({"name": f"w-{k}", "parent": "w", "minMember": size if k < minimum else 0})
        pods += [pod(f"w{k}-{i}", gpus=gpus, subgroup=f"w-{k}") for i in range(size)]
    if launcher:
        subgroups.append({"name": "launcher", "minMember": 1})
        pods.append(pod("launcher", gpus=gpus, subgroup="launcher"))
    constraints: dict[str, Any] = {"subGroups": {f"w-{k}": {"requiredTopologyLevel": level} for k in range(len(sizes))}}
    if held:
        constraints["global"] = {"requiredTopologyLevel": held}
    pg = podgroup({"subGroups": subgroups, "topologyConstraints": constraints})
    marked = [replace(sg, segment_pods=sizes[int(sg.name[2:])]) if sg.name[:2] == "w-" else sg for sg in pg.subgroups]
    return replace(pg, subgroups=tuple(marked)), pods


def segment_racks(assignments: dict[str, str], segments: int) -> list[set[str]]:
    racks = racks_of(assignments)
    return [{r for p, r in racks.items() if p.startswith(f"default/w{k}-")} for k in range(segments)]


# -- an elastic segment is whole or absent ---------------------------------------------------------


def test_the_elastic_pytorchjob_required_in_a_zone_goes_whole_to_the_zone_that_holds_it_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # examples/cluster-64.yaml: zone z1 runs five inference pods and has a cordoned node (26 free
    # nodes, room for 4 segments of 4 in its racks); zone z2 is empty. The job needs 21 nodes: a
    # master and 5 segments of 4, the last two elastic.
    text = (ROOT / "examples" / "workloads" / "pytorchjob.yaml").read_text()
    annotated = text.replace(
        "    kai.scheduler/topology: default\n",
        "    kai.scheduler/topology: default\n    kai.scheduler/topology-required-placement: zone\n",
    )
    assert annotated != text
    job = tmp_path / "pytorchjob-zone.yaml"
    job.write_text(annotated)
    args = ["simulate", "--output", "json", "-f", str(ROOT / "examples" / "cluster-64.yaml"), "-f", str(job)]
    assert main(args) == 0
    pods = [p for p in json.loads(capsys.readouterr().out)["pods"] if p["name"].startswith("elastic-")]
    assert len(pods) == 21
    assert all(p["node"] is not None and p["node"].startswith("gpu-z2-") for p in pods), pods
    by_segment: dict[str, list[str]] = {}
    for p in pods:
        if p["subGroup"].startswith("worker-seg-"):
            by_segment.setdefault(p["subGroup"], []).append(p["node"].rsplit("-", 1)[0])
    assert sorted(by_segment) == [f"worker-seg-{k}" for k in range(5)]
    assert all(len(racks) == 4 and len(set(racks)) == 1 for racks in by_segment.values()), by_segment


def test_an_elastic_segment_that_does_not_fit_whole_is_left_out() -> None:
    #   rack r1: 8 free     rack r2: 3 free
    # Segment 0 (mandatory) and segment 1 (elastic) need 4 nodes of one rack each; after
    # segment 0 in r1, r1 has 4 left: segment 1 goes there whole. With r1 at 7 free, segment 1
    # would find 3 nodes in each rack: it is left out, not placed 3 of 4.
    cluster = grid(zones=1, blocks=1, racks=2, nodes=8)
    pg, pods = segmented([4, 4], 1, "rack")
    r2 = {f"z1-b1-r2-n{n}": 0 for n in range(1, 6)}
    got = segment_racks(placed(run(cluster, pg, pods, used=used_gpus(r2))), 2)
    assert got == [{"z1-b1-r1"}, {"z1-b1-r1"}]
    result = run(cluster, pg, pods, used=used_gpus({**r2, "z1-b1-r1-n8": 0}))
    assert isinstance(result, Plan)
    assert segment_racks(dict(result.assignments), 2) == [{"z1-b1-r1"}, set()]
    assert sorted(result.unplaced) == [f"default/w1-{i}" for i in range(4)]


def test_an_elastic_segment_with_pods_running_adds_the_rest_whole_or_none() -> None:
    # Segment 1 runs 2 of its 4 pods in rack r2, which has 1 free node left: its other 2 pods
    # wait together (it never grows to 3 of 4); with 2 free nodes there both go.
    cluster = grid(zones=1, blocks=1, racks=2, nodes=4)
    pg, pods = segmented([4, 4], 1, "rack")
    running = {"default/w1-0": "z1-b1-r2-n1", "default/w1-1": "z1-b1-r2-n2"}
    pods = [replace(p, node_name=running[p.key]) if p.key in running else p for p in pods]
    busy = {"z1-b1-r2-n1": 0, "z1-b1-r2-n2": 0, "z1-b1-r2-n3": 0}
    result = run(cluster, pg, pods, used=used_gpus(busy))
    assert isinstance(result, Plan)
    assert sorted(result.unplaced) == ["default/w1-2", "default/w1-3"]
    del busy["z1-b1-r2-n3"]
    result = run(cluster, pg, pods, used=used_gpus(busy))
    assert isinstance(result, Plan)
    assert result.unplaced == ()
    assert racks_of(dict(result.assignments))["default/w1-2"] == "z1-b1-r2"


def test_an_elastic_segment_whose_pods_are_not_all_created_waits_and_its_room_counts() -> None:
    #   zone z1: rack r1 3 free, rack r2 7 free    zone z2: racks r1 and r2 8 free
    # Segment 1 (elastic, 4 pods) has 2 pods so far. Counting only those, z1 would hold the gang
    # (segments of 2 fit its racks); counting the 2 to come, only z2 holds it. Its 2 pods wait.
    cluster = grid(zones=2, blocks=1, racks=2, nodes=8)
    pg, pods = segmented([4, 4], 1, "rack", held="zone")
    present = [p for p in pods if p.name not in ("w1-2", "w1-3")]
    busy = {**{f"z1-b1-r1-n{n}": 0 for n in range(1, 6)}, "z1-b1-r2-n1": 0}
    result = run(cluster, pg, present, used=used_gpus(busy))
    assert isinstance(result, Plan)
    assert sorted(result.unplaced) == ["default/w1-0", "default/w1-1"]
    assert {n.split("-")[0] for n in result.assignments.values()} == {"z2"}
    result = run(cluster, pg, pods, used=used_gpus(busy))
    assert isinstance(result, Plan)
    assert result.unplaced == ()
    assert segment_racks(dict(result.assignments), 2) == [{"z2-b1-r1"}, {"z2-b1-r1"}]


def test_a_plain_elastic_subgroup_still_takes_what_fits() -> None:
    # Not a segment (no grouper made it): minMember 0 means as many of its pods as fit.
    cluster = grid(zones=1, blocks=1, racks=1, nodes=4)
    pg, pods = segmented([4, 6], 1, "rack")
    plain = replace(pg, subgroups=tuple(replace(sg, segment_pods=0) for sg in pg.subgroups))
    result = run(cluster, plain, pods)
    assert isinstance(result, Plan)
    assert len(result.unplaced) == 6  # the rack is full after segment 0
    result = run(grid(zones=1, blocks=1, racks=1, nodes=8), plain, pods)
    assert isinstance(result, Plan)
    assert len(result.unplaced) == 2  # 4 of the 6 fit


def test_a_zone_that_holds_every_pod_in_whole_segments_ranks_before_one_that_holds_the_minimum() -> None:
    #   zone z1: rack r1 3 free, rack r2 7 free    (10 free nodes, whole segments of 4: 1)
    #   zone z2: rack r1 8 free, rack r2 8 free    (16 free nodes, whole segments of 4: 4)
    # A launcher and two segments of 4 (one elastic): 9 nodes. By free nodes z1 is the tighter
    # zone, but it holds only the minimum; z2 holds them all.
    cluster = grid(zones=2, blocks=1, racks=2, nodes=8)
    pg, pods = segmented([4, 4], 1, "rack", launcher=True, held="zone")
    busy = {**{f"z1-b1-r1-n{n}": 0 for n in range(1, 6)}, "z1-b1-r2-n1": 0}
    result = run(cluster, pg, pods, used=used_gpus(busy))
    assert isinstance(result, Plan)
    assert result.unplaced == ()
    assert {n.split("-")[0] for n in result.assignments.values()} == {"z2"}


# -- the fewest domains for siblings that ask for the same -----------------------------------------


def test_slices_each_on_one_host_take_the_fewest_hosts_and_the_tightest_last() -> None:
    #   rack r1: a 8 free, f 6 free, b..e 2 free each, slices of 2 pods of 1 GPU each on one node
    # 5 slices: room for 4, 3, 1, 1, 1, 1 slices. Host by host the tightest would take b, c, d,
    # e and then a (5 hosts); the fewest take a (4 slices) and then the tightest for the last, b.
    free = {"a": 8, "f": 6, "b": 2, "c": 2, "d": 2, "e": 2}
    cluster = [node(n) for n in free]
    pg, pods = segmented([2] * 5, 5, "node", gpus=1)
    got = placed(run(cluster, pg, pods, used=used_gpus(free)))
    assert Counter(got.values()) == {"a": 8, "b": 2}
    slices = [{n for p, n in got.items() if p.startswith(f"default/w{k}-")} for k in range(5)]
    assert all(len(s) == 1 for s in slices)


def test_segments_in_racks_take_the_fewest_racks() -> None:
    #   block b1: rack r1 8 free, racks r2 and r3 4 free each
    # 3 segments of 4: one by one each would take the tightest rack (r2, r3, then r1: 3 racks);
    # together they take r1 for two and the tightest for the third (r2): 2 racks.
    cluster = grid(zones=1, blocks=1, racks=3, nodes=8)
    busy = {f"z1-b1-r{r}-n{n}": 0 for r in (2, 3) for n in range(5, 9)}
    pg, pods = segmented([4, 4, 4], 3, "rack")
    got = segment_racks(placed(run(cluster, pg, pods, used=used_gpus(busy))), 3)
    assert sorted(r for s in got for r in s) == ["z1-b1-r1", "z1-b1-r1", "z1-b1-r2"]


def test_equally_tight_domains_go_by_the_fewest_racks_their_segments_take() -> None:
    #   block b1: racks r1..r4 4 free each       16 free, segments of 4 take 4 racks
    #   block b2: racks r1, r2 8 free, r3, r4 full  16 free, segments of 4 take 2 racks
    # 4 segments of 4 in one block: both leave nothing; b2 holds them in fewer racks.
    cluster = grid(zones=1, blocks=2, racks=4, nodes=8)
    busy = {f"z1-b1-r{r}-n{n}": 0 for r in range(1, 5) for n in range(5, 9)}
    busy |= {f"z1-b2-r{r}-n{n}": 0 for r in (3, 4) for n in range(1, 9)}
    pg, pods = segmented([4] * 4, 4, "rack", held="block")
    got = segment_racks(placed(run(cluster, pg, pods, used=used_gpus(busy))), 4)
    assert sorted(r for s in got for r in s) == ["z1-b2-r1", "z1-b2-r1", "z1-b2-r2", "z1-b2-r2"]


@pytest.mark.parametrize(
    ("caps", "room", "count", "want"),
    [
        pytest.param([4, 3, 1, 1], [8, 6, 2, 2], 5, [(0, 4), (2, 1)], id="most-first-then-tightest-last"),
        pytest.param([3, 3, 2], [6, 7, 4], 2, [(2, 2)], id="one-domain-holds-all-the-tightest"),
        pytest.param([2, 2], [5, 4], 4, [(1, 2), (0, 2)], id="ties-least-room-first"),
        pytest.param([1, 0, 1], [1, 0, 1], 3, [(0, 1), (2, 1)], id="room-runs-out"),
    ],
)
def test_fewest_domains_is_kueues_greedy(
    caps: list[int], room: list[int], count: int, want: list[tuple[int, int]]
) -> None:
    assert fewest_domains(caps, room, count) == want


# -- property: never more domains than Kueue's greedy, never a slice broken ------------------------

LEVELS = ("zone", "block", "rack", "node")


def _path(n: NodeInfo) -> tuple[str, ...]:
    return (*(n.labels[label] for label in (ZONE, BLOCK, RACK)), n.name)


def kueue_greedy(paths: dict[tuple[str, ...], int], region: tuple[str, ...], level: int, count: int) -> int:
    """Kueue's slice assignment inside REGION (a path prefix), level by level down to the slice
    level (index into LEVELS): each domain's children by room for slices, most first (then least
    room, then name), taken whole until the rest fits in one, that one the tightest. PATHS: each
    slice-level domain's room in slices. Returns the slice-level domains used."""

    def room(prefix: tuple[str, ...]) -> int:
        return sum(c for p, c in paths.items() if p[: len(prefix)] == prefix)

    def take(kids: list[tuple[str, ...]], need: int) -> list[tuple[tuple[str, ...], int]]:
        kids = sorted(kids, key=lambda k: -room(k))
        out = []
        for i, k in enumerate(kids):
            if need <= 0:
                break
            if room(k) >= need:
                out.append((min((j for j in kids[i:] if room(j) >= need), key=room), need))
                break
            out.append((k, room(k)))
            need -= room(k)
        return out

    current = [(region, count)]
    for depth in range(len(region), level + 1):
        nxt = []
        for prefix, need in current:
            nxt += take(sorted({p[: depth + 1] for p in paths if p[: len(prefix)] == prefix}), need)
        current = nxt
    return len(current)


@st.composite
def slice_cases(draw: Any) -> tuple[list[NodeInfo], dict[str, int], int, int, int, int, str | None]:
    nodes, free = [], {}
    for z in range(draw(st.integers(1, 2))):
        for b in range(draw(st.integers(1, 2))):
            for r in range(draw(st.integers(1, 3))):
                for n in range(draw(st.integers(1, 4))):
                    name = f"z{z}-b{b}-r{r}-n{n}"
                    nodes.append(node(name, f"z{z}", f"b{b}", f"r{r}"))
                    free[name] = draw(st.integers(0, 8))
    gpus = draw(st.sampled_from([1, 2, 4]))
    size = draw(st.integers(1, 4))
    count = draw(st.integers(1, 6))
    elastic = draw(st.integers(0, 2))
    level = draw(st.sampled_from(["rack", "node"]))
    held = draw(st.sampled_from([None, "zone", "block"]))
    return nodes, free, gpus, size, count, elastic, f"{level}|{held or ''}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slice_cases())
def test_slices_never_take_more_domains_than_kueues_greedy_nor_break(case: Any) -> None:
    nodes, free, gpus, size, count, elastic, levels = case
    level, held = levels.split("|")
    pg, pods = segmented([size] * (count + elastic), count, level, gpus=gpus, held=held or None)
    built = build_gang(pg, pods, {"default": TOPO})
    assert built.gang is not None
    result = plan(ClusterSnapshot.of(nodes, used_gpus(free)), built.gang)
    if not isinstance(result, Plan):
        return
    depth = LEVELS.index(level)
    by_name = {n.name: n for n in nodes}
    where: dict[int, list[tuple[str, ...]]] = {}
    for key, name in result.assignments.items():
        k = int(key.split("/w")[1].split("-")[0])
        where.setdefault(k, []).append(_path(by_name[name]))
    for k in range(count + elastic):
        placed_pods = where.get(k, [])
        assert len(placed_pods) in ((size,) if k < count else (0, size)), f"slice {k} broken: {placed_pods}"
        assert len({p[: depth + 1] for p in placed_pods}) <= 1, f"slice {k} spans {level}s"
    used = {p[: depth + 1] for k in range(count) for p in where[k]}
    # The smallest domain holding the minimum: Kueue's greedy inside it can do no better.
    region = next(iter(used))
    while any(p[: len(region)] != region for p in used):
        region = region[:-1]
    room: dict[tuple[str, ...], int] = Counter()
    for n in nodes:
        room[_path(n)[: depth + 1]] += free[n.name] // gpus
    slices = {p: r // size for p, r in room.items()}
    assert len(used) <= kueue_greedy(slices, region, depth, count)
