"""bench/trace.py on a small fixed-seed trace: what its figures rest on, checked in seconds.

The cluster is the benchmark's default shape, smaller: 2 zones > 2 blocks > 4 racks > 4 nodes
of 8 GPUs (64 nodes, 512 GPUs, 32 GPUs a rack).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.tracesim import cluster as clusters
from bench.tracesim import metrics, policies, workload
from bench.tracesim.replay import replay

SHAPE = clusters.Shape(nodes=64, zones=2, blocks=2, racks=4)
SPEC = workload.TraceSpec(jobs=150, seed=3)


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


def test_the_trace_is_seeded_and_has_the_shapes_the_issue_asks_for(
    setting: tuple[clusters.Cluster, list[workload.Job]],
) -> None:
    cluster, jobs = setting
    assert jobs == workload.generate(SPEC, cluster)
    assert {j.segment for j in jobs} >= {0, 4, 8}
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
            racks = len(set(cluster.rack_of[list(p.nodes)].tolist()))
            assert racks >= metrics.lower_bound(cluster, p.job.demand)


def test_topogang_alone_on_an_empty_cluster_reaches_the_lower_bound(
    setting: tuple[clusters.Cluster, list[workload.Job]],
) -> None:
    cluster, jobs = setting
    topogang = policies.Topogang(cluster)
    empty = np.zeros(len(cluster.nodes), dtype=np.int64)
    for job in jobs:
        topogang.prepare(job)
        nodes = topogang.place(job, empty, empty)
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
