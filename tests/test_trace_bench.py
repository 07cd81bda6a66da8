"""bench/trace.py on a small fixed-seed trace: what its figures rest on, checked in seconds.

The cluster is the benchmark's default shape, smaller: 2 zones > 2 blocks > 4 racks > 4 nodes
of 8 GPUs (64 nodes, 512 GPUs, 32 GPUs a rack).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.tracesim import cluster as clusters
from bench.tracesim import metrics, policies, public, workload
from bench.tracesim.replay import replay
from extender.core.reservations import Settings

SHAPE = clusters.Shape(nodes=64, zones=2, blocks=2, racks=4)
SPEC = workload.TraceSpec(jobs=400, seed=3, services=0.0)  # services: tests/test_trace_defrag.py


@pytest.fixture(scope="module")
def setting() -> tuple[clusters.Cluster, list[workload.Job]]:
    cluster = clusters.build(SHAPE)
    return cluster, workload.generate(SPEC, cluster)


@pytest.fixture(scope="module")
def rows(setting: tuple[clusters.Cluster, list[workload.Job]]) -> dict[str, dict[str, object]]:
    cluster, jobs = setting
    out = {}
    for policy in policies.all_policies(cluster):
        run = replay(cluster, jobs, policy)
        out[policy.name] = metrics.summarize(cluster, jobs, run) | {"run": run}
    return out


def test_the_trace_is_seeded_and_has_segments_required_levels_and_zone_sized_gangs(
    setting: tuple[clusters.Cluster, list[workload.Job]],
) -> None:
    cluster, jobs = setting
    assert jobs == workload.generate(SPEC, cluster)
    assert {j.segment for j in jobs} >= {0, 4}  # racks of 4 nodes: no segment of 8 whole nodes fits
    assert {j.job_level for j in jobs} >= {"", "block"}
    assert any(j.demand > cluster.domain_gpus("block").max() for j in jobs)  # some need a zone
    assert all(j.segment == 0 or j.segment * j.gpus <= cluster.domain_gpus("rack").min() for j in jobs)


def test_topology_aware_policies_break_no_required_constraint(rows: dict[str, dict[str, object]]) -> None:
    for name, row in rows.items():
        assert row["overcommitted"] == 0, name
        assert row["never_placed"] == 0, name
        assert row["placed"] == SPEC.jobs, name
        if name != "first-fit":
            assert row["broken_required"] == 0, name
    assert rows["first-fit"]["broken_required"] > 0  # the check sees a broken constraint


def test_no_gang_uses_fewer_racks_than_the_lower_bound(
    setting: tuple[clusters.Cluster, list[workload.Job]], rows: dict[str, dict[str, object]]
) -> None:
    cluster, _ = setting
    for row in rows.values():
        run = row["run"]
        for p in run.placed.values():  # type: ignore[attr-defined]
            racks = len(set(cluster.rack_of[list(p.nodes)].tolist()))  # the pods it started with
            assert racks >= metrics.lower_bound(cluster, len(p.nodes) * p.job.gpus)


def test_topogang_alone_on_an_empty_cluster_reaches_the_lower_bound(
    setting: tuple[clusters.Cluster, list[workload.Job]],
) -> None:
    cluster, jobs = setting
    topogang = policies.Topogang(cluster)
    empty = np.zeros(len(cluster.nodes), dtype=np.int64)
    for job in jobs:
        topogang.prepare(job)
        nodes = topogang.place(job, empty, empty, 0.0)
        assert nodes is not None, job
        assert len(set(cluster.rack_of[nodes].tolist())) == metrics.lower_bound(cluster, job.demand), job
        assert metrics.broken(cluster, job, tuple(nodes)) == 0


def test_lower_bound_takes_the_largest_racks_first() -> None:
    cluster = clusters.build(clusters.Shape(nodes=64, zones=1, blocks=1, racks=8, uneven=True, seed=2))
    caps = sorted(cluster.rack_gpus().tolist(), reverse=True)
    assert caps[0] > caps[-1]  # uneven
    assert metrics.lower_bound(cluster, caps[0]) == 1
    assert metrics.lower_bound(cluster, caps[0] + 1) == 2
    assert metrics.lower_bound(cluster, caps[0] + caps[1] + 1) == 3


def test_broken_counts_each_segment_and_the_job_level() -> None:
    cluster = clusters.build(SHAPE)
    job = workload.Job(0, 0, 8, 8, 1, segment=4, segment_level="rack", job_level="block")
    same_rack = tuple(range(4))
    assert metrics.broken(cluster, job, same_rack + tuple(range(4, 8))) == 0
    assert metrics.broken(cluster, job, (0, 1, 2, 4, 12, 13, 14, 15)) == 1  # segment 0 over two racks
    assert metrics.broken(cluster, job, (*same_rack, 16, 17, 18, 19)) == 1  # two blocks


def test_the_csv_round_trips_and_bad_rows_name_line_and_field(
    setting: tuple[clusters.Cluster, list[workload.Job]], tmp_path: Path
) -> None:
    _, jobs = setting
    path = tmp_path / "t.csv"
    workload.write_csv(jobs, path)
    assert workload.read_csv(path) == sorted(jobs, key=lambda j: (j.arrival, j.id))
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival,pods,gpus_per_pod,segment,levels,duration\n0,4,8,4,rack/,60\n1,four,8,0,,60\n")
    with pytest.raises(workload.TraceError, match=r"bad.csv:3: pods: 'four' is not an integer"):
        workload.read_csv(bad)
    bad.write_text("arrival,pods,gpus_per_pod,segment,levels,duration\n0,6,8,4,rack/,60\n")
    with pytest.raises(workload.TraceError, match=r"bad.csv:2: segment: 4 must divide pods \(6\)"):
        workload.read_csv(bad)
    bad.write_text("arrival,pods,gpus,segment,levels,duration\n")
    with pytest.raises(workload.TraceError, match=r"unknown columns \['gpus'\], missing \['gpus_per_pod'\]"):
        workload.read_csv(bad)


def test_the_generator_follows_the_published_figures_it_cites() -> None:
    cluster = clusters.build(clusters.SHAPES["512"])
    jobs = workload.generate(workload.TraceSpec(jobs=4000, seed=5), cluster)
    kalos = workload.PROFILES["kalos"]
    gpus = np.array([j.demand for j in jobs])
    runs = np.array([j.duration for j in jobs])
    assert np.median(gpus) == 1
    assert 0.7 * kalos.mean_gpus < gpus.mean() < 1.3 * kalos.mean_gpus
    assert gpus.max() <= kalos.max_gpus
    assert 0.85 * kalos.median_s < np.median(runs) < 1.15 * kalos.median_s
    assert all(j.pods == 1 or j.gpus == cluster.shape.gpus for j in jobs)  # whole nodes beyond one node


def test_nvl72_racks_get_nvidias_segment_sizes() -> None:
    cluster = clusters.build(clusters.SHAPES["nvl72"])
    assert int(cluster.domain_gpus("rack").max()) == 72
    jobs = workload.generate(workload.TraceSpec(jobs=3000, seed=2), cluster)
    for j in jobs:
        expected = 16 if j.demand >= 128 else 4 if 32 <= j.demand <= 64 else 0
        assert j.segment == expected, j
    assert {j.segment for j in jobs} == {0, 4, 16}


def test_the_bounded_share_changes_only_the_bounds() -> None:
    cluster = clusters.build(SHAPE)
    half = workload.generate(workload.TraceSpec(jobs=400, bounded=0.5, seed=4), cluster)
    none = workload.generate(workload.TraceSpec(jobs=400, bounded=0.0, seed=4), cluster)
    every = workload.generate(workload.TraceSpec(jobs=400, bounded=1.0, seed=4), cluster)
    assert [dataclasses.replace(j, bound=0.0) for j in half] == none
    assert all(j.bound == 0 for j in none)
    assert all(j.bound == pytest.approx(1.5 * j.duration, abs=0.01) for j in every if not j.movable)
    assert all(j.bound == 0 for j in every if j.movable)  # services declare no end
    assert 0.4 < sum(1 for j in half if j.bound) / len(half) < 0.6


def test_the_elastic_share_changes_only_the_minimums() -> None:
    cluster = clusters.build(SHAPE)
    some = workload.generate(workload.TraceSpec(jobs=400, elastic=0.2, seed=4), cluster)
    none = workload.generate(workload.TraceSpec(jobs=400, elastic=0.0, seed=4), cluster)
    assert [dataclasses.replace(j, minimum=0) for j in some] == none
    multi = [j for j in some if j.pods > 1]
    elastic = [j for j in multi if j.elastic]
    assert 0.1 < len(elastic) / len(multi) < 0.3
    for j in elastic:  # half its pods, rounded up to whole segments, and fewer than all of them
        unit = j.segment or 1
        assert j.minimum == -(-(j.pods // unit) // 2) * unit < j.pods, j
    assert all(j.minimum == 0 for j in some if j.pods == 1 or (j.segment and j.pods == j.segment))


def test_two_elastic_jobs_that_arrive_together_both_start_with_minimums_first() -> None:
    # 64 nodes; two jobs of 48 one-node pods that may start with 24: both minimums fit, both whole do not.
    cluster = clusters.build(SHAPE)
    jobs = [workload.Job(i, 0.0, 48, 8, 100.0, minimum=24) for i in (0, 1)]
    first = replay(cluster, jobs, policies.Topogang(cluster))
    whole = replay(cluster, jobs, policies.Topogang(cluster, "whole", minimums_first=False))
    assert [first.placed[i].start for i in (0, 1)] == [0.0, 0.0]
    assert [len(first.placed[i].nodes) for i in (0, 1)] == [24, 24]
    assert first.grown == 16 + 24  # the room left to the first in queue order; the second's when it ends
    assert len(whole.placed[0].nodes) == 48
    assert whole.placed[1].start == 100.0  # the first job's optional pods kept it out until that ended
    assert first.overcommitted == whole.overcommitted == 0


def test_a_minimum_takes_the_room_of_optional_pods_and_their_job_runs_slower() -> None:
    # An elastic job runs 48 pods (24 optional) on the 64 nodes; a rigid job of 24 arrives at 10 s.
    cluster = clusters.build(SHAPE)
    jobs = [workload.Job(0, 0.0, 48, 8, 100.0, minimum=24), workload.Job(1, 10.0, 24, 8, 100.0)]
    first = replay(cluster, jobs, policies.Topogang(cluster))
    whole = replay(cluster, jobs, policies.Topogang(cluster, "whole", minimums_first=False))
    assert first.placed[1].start == 10.0
    assert first.given_back == 8  # the fewest that make room: 16 nodes were free
    assert whole.placed[1].start == 100.0  # it waited for the elastic job to end
    # 10 s at 48 pods, then 40 of 48: the 90 s left at full size take 108 s; the rigid job ends at 110 s
    assert first.times[-1] == pytest.approx(118.0)
    assert first.overcommitted == 0


def _starving(bounded: bool) -> list[workload.Job]:
    """A gang of a whole block (16 nodes) arrives at 300 s, when 1-node jobs of 100 s, arriving
    faster than the 64 nodes can serve them until 1,000 s, fill the cluster; BOUNDED adds 1-node
    jobs of 20 s that declare a bound of 30 s, every 3 s."""
    stream = [workload.Job(i, i * 1.5, 1, 8, 100.0) for i in range(1, 667)]
    if bounded:
        stream += [workload.Job(1000 + i, i * 3.0 + 0.1, 1, 8, 20.0, bound=30.0) for i in range(1, 333)]
    big = workload.Job(0, 300.2, 16, 8, 100.0, job_level="block")
    return sorted([big, *stream], key=lambda j: (j.arrival, j.id))


@pytest.mark.parametrize("bounded", [False, True])
def test_a_reservation_starts_the_large_gang_that_small_gangs_starve(bounded: bool) -> None:
    cluster = clusters.build(SHAPE)
    jobs = _starving(bounded)
    waits = {}
    for policy in (policies.Topogang(cluster), policies.Topogang(cluster, "r", reserve=Settings(limit=1))):
        run = replay(cluster, jobs, policy)
        assert run.overcommitted == 0
        waits[policy.name] = run.placed[0].start - 300.2
        if policy.name == "r":
            assert run.reservations >= 1
            assert (len(run.backfilled) > 0) is bounded  # bounded 1-node jobs end before the estimate
    assert waits["topogang"] > 600  # starved until the stream ends
    assert waits["r"] <= 200  # one job length to drain the block, and the queue ahead of it


def test_the_drain_is_how_long_the_room_would_take_to_free_if_nothing_else_started() -> None:
    cluster = clusters.build(SHAPE)
    jobs = _starving(False)
    run = replay(cluster, jobs, policies.Topogang(cluster))
    assert list(run.drain) == [0]  # only jobs larger than a rack
    assert 0 < run.drain[0] <= 100  # the cluster is full; the block's last 100 s job ends within 100 s
    assert run.placed[0].start - 300.2 > 600  # without holding, the wait is far longer than the drain
    row = metrics.summarize(cluster, jobs, run)
    assert row["drain_p99_medium_s"] == pytest.approx(run.drain[0], abs=1)  # a block's 16 nodes: medium


def test_a_public_trace_is_mapped_onto_gangs_by_the_documented_rule(tmp_path: Path) -> None:
    cluster = clusters.build(SHAPE)
    path = tmp_path / "trace_kalos.csv"
    path.write_text(
        "job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time\n"
        "a,u1,1,0,8,Other,COMPLETED,2023-05-17 11:00:00+00:00,,,50,0,0\n"  # a CPU job: left out
        "b,u1,1,4,8,Other,COMPLETED,2023-05-17 11:00:10+00:00,,,100,0,400\n"
        "c,u1,2,12,8,Pretrain,FAILED,2023-05-17 11:00:30+00:00,,,3600,0,43200\n"
        "d,u1,1,1,8,Eval,COMPLETED,2023-05-17 11:00:20+00:00,,,0,0,0\n"
    )
    jobs = public.read_public(path, cluster, jobs=10, load=0.5, bounded=0.0, seed=1)
    assert [(j.pods, j.gpus, j.duration) for j in jobs] == [(1, 4, 100.0), (1, 1, 1.0), (2, 8, 3600.0)]
    gaps = np.diff([j.arrival for j in jobs])
    assert gaps[1] == pytest.approx(gaps[0], rel=0.05)  # the trace's gaps (10 s, 10 s), scaled (ms rounding)
    served = public.read_public(path, cluster, jobs=10, load=0.5, bounded=0.0, seed=1, services=0.3)
    assert [(j.pods, j.gpus, j.duration) for j in served if not j.movable] == [
        (1, 4, 100.0),
        (1, 1, 1.0),
        (2, 8, 3600.0),
    ]
    assert any(j.movable for j in served)  # the generator's services beside the trace's jobs
    bad = tmp_path / "bad.csv"
    bad.write_text("gpu_num,submit_time,duration\n8,yesterday,60\n8,2023-05-17 11:00:00,60\n")
    with pytest.raises(workload.TraceError, match=r"bad.csv:2: submit_time: 'yesterday' is not a date and time"):
        public.read_public(bad, cluster, jobs=10, load=0.5, bounded=0.0, seed=1)


def test_paired_differences_say_when_a_gap_is_noise() -> None:
    from bench.tracesim import compare

    mean, half = compare.interval([1.0, 2.0, 3.0])
    assert mean == pytest.approx(2.0)
    assert half == pytest.approx(4.303 / 3**0.5)
    per = "wait_p99_large_s_per_trace"
    rows = [
        {"policy": "a", "traces": 3, "allocation_per_trace": [0.8, 0.7, 0.9], per: [9, 5, 7]},
        {"policy": "b", "traces": 3, "allocation_per_trace": [0.81, 0.71, 0.91], per: [1, 9, 2]},
    ]
    table = compare.paired(rows, "a")["b"]
    assert table["allocation"][0] == pytest.approx(0.01)  # the same gap on every trace: not noise
    assert table["allocation"][1] == pytest.approx(0.0, abs=1e-9)
    assert table["allocation"][2:] == (3, 3)
    assert table["wait_p99_large_s"][2:] == (2, 3)  # shorter waits on 2 of 3 traces
    text = compare.describe(rows, "a")
    assert "alloc +1.0±0.0pt (3/3)" in text
    assert "L p99 -3±" in text
    assert "~" in text  # the large-gang gap is noise


def _trace_bench() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("trace_bench", Path(__file__).parents[1] / "bench" / "trace.py")
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_a_variant_names_settings_fields_with_their_types() -> None:
    import argparse

    bench = _trace_bench()
    name, fields = bench._variant("large:coarsest_only=1;floor=900;heads=false;whole_domain=true")
    assert (name, fields) == ("large", {"coarsest_only": 1, "floor": 900.0, "heads": False, "whole_domain": True})
    with pytest.raises(argparse.ArgumentTypeError, match="'limt' is not a Settings field"):
        bench._variant("x:limt=2")
    assert bench._variant("big:largest_first=1") == ("big", {"largest_first": True})
    assert bench._sizes("medium, large") == frozenset({"medium", "large"})
    with pytest.raises(argparse.ArgumentTypeError, match="expected size classes among small, medium, large"):
        bench._sizes("huge")


def test_large_gangs_p99_is_split_at_the_lowest_priority() -> None:
    """Behind a gang that fills the cluster, the gang of priority 100 starts first and the one of
    priority 0 after it."""
    cluster = clusters.build(SHAPE)
    whole = cluster.capacity // 8  # every node, 8 GPUs each
    jobs = [
        workload.Job(1, 0.0, whole, 8, 100.0),
        workload.Job(2, 1.0, whole, 8, 50.0, priority=0),
        workload.Job(3, 2.0, whole, 8, 50.0, priority=100),
    ]
    run = replay(cluster, jobs, policies.BestFit(cluster))
    row = metrics.summarize(cluster, jobs, run, warmup=0.0)
    assert row["wait_p99_large_above_s"] == pytest.approx(98.0)  # starts when the first ends
    # the first (priority 0, no wait) and the lowest-priority one, which starts after the other
    assert row["wait_p99_large_lowest_s"] == pytest.approx(float(np.percentile([0.0, 149.0], 99)), abs=0.1)


def test_one_priority_replays_the_same_jobs_at_priority_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two zone-sized gangs wait for one zone to free: the later outranks the earlier and goes
    first; with --one-priority the earlier does, and no large gang is left above the lowest."""
    import orjson

    csv = tmp_path / "t.csv"
    csv.write_text(
        "arrival,pods,gpus_per_pod,segment,levels,duration,priority\n"
        "0,256,8,0,/zone,100,0\n0,256,8,0,/zone,1000,0\n1,256,8,0,/zone,50,0\n2,256,8,0,/zone,50,100\n"
    )
    rows = {}
    for flags in ([], ["--one-priority"]):
        args = ["--trace", str(csv), "--policies", "bestfit", "--warmup", "0", "--json", "--no-pictures", *flags]
        assert _trace_bench().main(args) == 0
        rows[bool(flags)] = orjson.loads(capsys.readouterr().out.splitlines()[0])
    assert rows[False]["wait_p99_large_above_s"] == pytest.approx(98.0)  # priority 100 first
    assert rows[True]["wait_p99_large_above_s"] == 0.0
    assert rows[True]["wait_max_large_s"] == pytest.approx(148.0)  # the priority-100 one now last


def test_a_trace_with_nothing_to_measure_is_refused_naming_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("arrival,pods,gpus_per_pod,segment,levels,duration\n0,256,8,0,/zone,100\n1,4,8,4,rack/,50\n")
    for sizes in ("large", "medium"):  # one job left; none left
        assert _trace_bench().main(["--trace", str(csv), "--sizes", sizes, "--warmup", "0", "--no-pictures"]) == 2
        assert "needs jobs arriving at two moments at least" in capsys.readouterr().err
