"""The trace bench's movable work and its topogang+defrag policy (bench/tracesim/defrag.py).

A hand-made state first: 3 racks of 2 nodes of 8 GPUs, one 1-GPU service running in each rack,
and a gang of 2 whole nodes required in one rack: no rack is whole, so it fits only once a
service moves. Then a small generated trace with many services and a tight hourly limit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.tracesim import cluster as clusters
from bench.tracesim import metrics, policies, workload
from bench.tracesim.defrag import Limits, Mover
from bench.tracesim.replay import Placed, Replay, _walk, replay

SMALL = clusters.Shape(nodes=6, zones=1, blocks=1, racks=3)
SERVICE_NODES = (0, 2, 4)  # one in each rack
GANG = workload.Job(10, 100.0, 2, 8, 3600.0, segment=2, segment_level="rack")


def _services(cluster: clusters.Cluster) -> tuple[np.ndarray, np.ndarray, dict[int, Placed]]:
    used = np.zeros(len(cluster.nodes), dtype=np.int64)
    pods = np.zeros(len(cluster.nodes), dtype=np.int64)
    running = {}
    for k, node in enumerate(SERVICE_NODES):
        job = workload.Job(k, 0.0, 1, 1, 86400.0, movable=True)
        running[k] = Placed(job, 0.0, (node,), (0,), {0: node}, job.duration, 0.0)
        used[node] += 1
        pods[node] += 1
    return used, pods, running


def _try_gang(policy: policies.Policy) -> tuple[list[workload.Job], Replay, np.ndarray, dict[int, Placed]]:
    cluster = clusters.build(SMALL)
    used, pods, running = _services(cluster)
    policy.prepare(GANG)
    out = Replay(policy.name, True)
    started = _walk(cluster, [GANG], policy, GANG.arrival, used, pods, out, running, set())
    return started, out, used, running


def test_a_rack_gang_blocked_by_one_service_a_rack_starts_once_the_fewest_move() -> None:
    cluster = clusters.build(SMALL)
    started, _, _, _ = _try_gang(policies.Topogang(cluster))
    assert started == []  # without moves it waits: every rack has a service

    started, out, used, running = _try_gang(policies.Topogang(cluster, "topogang+defrag", moves=Limits()))
    assert started == [GANG]
    assert len(out.moves) == 1  # one service out of one rack: the fewest
    _, job, pod, node = out.moves[0]
    gang_racks = {int(cluster.rack_of[n]) for n in out.placed[GANG.id].nodes}
    assert len(gang_racks) == 1
    assert int(cluster.rack_of[node]) not in gang_racks  # its new node is outside the gang's rack
    assert running[job].current[pod] == node
    assert running[job].end() == 86400.0  # it keeps running there: same end
    assert (used <= cluster.gpus).all()
    expected = np.zeros(len(cluster.nodes), dtype=np.int64)
    for p in [*running.values(), out.placed[GANG.id]]:
        np.add.at(expected, list(p.current.values()), p.job.gpus)
    assert (used == expected).all()


def test_the_hourly_limit_and_a_higher_priority_service_keep_it_waiting() -> None:
    cluster = clusters.build(SMALL)
    policy = policies.Topogang(cluster, "topogang+defrag", moves=Limits(per_hour=0))
    started, out, _, _ = _try_gang(policy)
    assert started == []
    assert out.moves == []
    assert policy.mover is not None
    assert policy.mover.log == [(GANG.id, "budget")]

    urgent = workload.Job(11, 100.0, 2, 8, 3600.0, segment=2, segment_level="rack", priority=-1)
    policy = policies.Topogang(cluster, "topogang+defrag", moves=Limits())
    used, pods, running = _services(cluster)
    policy.prepare(urgent)
    out = Replay(policy.name, True)
    assert _walk(cluster, [urgent], policy, 100.0, used, pods, out, running, set()) == []
    assert policy.mover is not None
    assert policy.mover.log == [(urgent.id, "none")]  # every service is above its priority


def test_the_limiter_counts_a_sliding_hour_and_a_cooldown_per_pod() -> None:
    mover = Mover(Limits(per_hour=2, cooldown=600.0))
    mover.moved(["trace/j1-0", "trace/j2-0"], 100.0)
    assert mover.room_left(100.0) == 0
    assert mover.room_left(3699.0) == 0
    assert mover.room_left(3700.0) == 2
    assert mover.cooling("trace/j1-0", 699.0)
    assert not mover.cooling("trace/j1-0", 700.0)
    assert not mover.cooling("trace/j3-0", 100.0)


SHAPE = clusters.Shape(nodes=64, zones=2, blocks=2, racks=4)
SPEC = workload.TraceSpec(jobs=400, seed=3, services=0.3)
LIMITS = Limits(per_hour=3, cooldown=1800.0)


@pytest.fixture(scope="module")
def runs() -> tuple[clusters.Cluster, list[workload.Job], dict[str, Replay]]:
    cluster = clusters.build(SHAPE)
    jobs = workload.generate(SPEC, cluster)
    out = {}
    for policy in (policies.Topogang(cluster), policies.Topogang(cluster, "topogang+defrag", moves=LIMITS)):
        out[policy.name] = replay(cluster, jobs, policy)
    return cluster, jobs, out


def test_services_are_movable_single_pods_of_their_share_and_leave_the_other_jobs_alone() -> None:
    cluster = clusters.build(SHAPE)
    jobs = workload.generate(SPEC, cluster)
    assert jobs == workload.generate(SPEC, cluster)  # the same seed: the same jobs, for every policy
    services = [j for j in jobs if j.movable]
    assert services
    assert all(j.pods == 1 and not j.segment and not j.job_level and not j.bound for j in services)
    assert {j.gpus for j in services} <= {1, 2, 4, 8}
    standing = sum(j.gpus for j in services if j.arrival <= workload.window(jobs, 0.1)[0])
    assert 0.6 * 0.3 * 0.85 * cluster.capacity <= standing <= 1.4 * 0.3 * 0.85 * cluster.capacity
    plain = workload.generate(workload.TraceSpec(jobs=400, seed=3, services=0.0), cluster)
    shape = [(j.pods, j.gpus, j.segment, j.job_level, j.priority, j.duration, j.minimum) for j in plain]
    assert [
        (j.pods, j.gpus, j.segment, j.job_level, j.priority, j.duration, j.minimum) for j in jobs if not j.movable
    ] == shape
    assert not any(j.movable for j in plain)


def test_the_defrag_replay_moves_within_its_limits_and_breaks_nothing(
    runs: tuple[clusters.Cluster, list[workload.Job], dict[str, Replay]],
) -> None:
    cluster, jobs, out = runs
    run = out["topogang+defrag"]
    assert run.moves, "the trace is built to need moves"
    times = sorted(t for t, *_ in run.moves)
    for i, t in enumerate(times):  # at most per_hour in any hour
        assert sum(1 for u in times[i:] if u < t + 3600.0) <= LIMITS.per_hour
    last: dict[tuple[int, int], float] = {}
    by_id = {j.id: j for j in jobs}
    for t, job, pod, _ in sorted(run.moves):
        assert by_id[job].movable
        assert t >= last.get((job, pod), -np.inf) + LIMITS.cooldown  # the cooldown per pod
        last[(job, pod)] = t
    for name, r in out.items():
        row = metrics.summarize(cluster, jobs, r)
        assert row["overcommitted"] == 0, name
        assert row["broken_required"] == 0, name
        assert sorted(r.placed) == sorted(j.id for j in jobs), name  # every job of the same trace placed
    moved = {job for _, job, _, _ in run.moves}
    for jid in moved:  # a moved service ends when it would have: its run time is unchanged
        p = run.placed[jid]
        assert p.end() == pytest.approx(p.start + p.job.duration)
    row = metrics.summarize(cluster, jobs, run)
    assert row["moves"] <= len(run.moves)
    assert row["moves_per_100_gpu_h"] > 0
    assert row["moves_per_hour"] > 0
    assert sum(row[f"defrag_{s}_moved"] for s in metrics.SIZES) >= 1


def test_a_csv_says_which_jobs_are_movable_and_refuses_a_movable_gang(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    jobs = [workload.Job(0, 0.0, 1, 2, 60.0, movable=True), workload.Job(1, 1.0, 4, 8, 60.0)]
    workload.write_csv(jobs, path)
    assert workload.read_csv(path) == jobs
    path.write_text("arrival,pods,gpus_per_pod,segment,levels,duration,movable\n0,4,8,0,,60,1\n", encoding="utf-8")
    with pytest.raises(workload.TraceError, match="movable: only a single pod"):
        workload.read_csv(path)
    path.write_text("arrival,pods,gpus_per_pod,segment,levels,duration,movable\n0,1,8,0,,60,yes\n", encoding="utf-8")
    with pytest.raises(workload.TraceError, match="movable: 'yes' is not 0 or 1"):
        workload.read_csv(path)
    with pytest.raises(workload.TraceError, match="services: 1 is not a share"):
        workload.generate(workload.TraceSpec(jobs=10, services=1.0), clusters.build(SHAPE))


TWO_BLOCKS = clusters.Shape(nodes=12, zones=1, blocks=2, racks=3)  # racks of 2 nodes, 3 a block


def test_an_elastic_jobs_optional_pod_moves_only_within_its_own_required_block() -> None:
    """Block 0: the elastic job E (3 pods of 4 GPUs, minimum 2, required in one block) runs its
    minimum on node 0 and its optional pod on node 2 (rack 1); node 4 has 2 GPUs of a job that
    stays. Block 1: node 6 has 4 GPUs of a job that stays, nodes 8 and 10 one each. The rack gang
    fits only in rack 1 once E's optional pod moves; the tightest node for it is node 6 (block 1),
    but E must stay in block 0: node 4, the tightest there."""
    cluster = clusters.build(TWO_BLOCKS)
    used = np.zeros(len(cluster.nodes), dtype=np.int64)
    pods = np.zeros(len(cluster.nodes), dtype=np.int64)
    elastic = workload.Job(1, 0.0, 3, 4, 86400.0, job_level="block", minimum=2)
    running = {1: Placed(elastic, 0.0, (0, 0, 2), (), {0: 0, 1: 0, 2: 2}, elastic.duration, 0.0)}
    for k, (node, gpus) in enumerate(((4, 2), (6, 4), (8, 1), (10, 1)), start=2):
        job = workload.Job(k, 0.0, 1, gpus, 86400.0)
        running[k] = Placed(job, 0.0, (node,), (), {0: node}, job.duration, 0.0)
    for p in running.values():
        for node in p.current.values():
            used[node] += p.job.gpus
            pods[node] += 1
    gang = workload.Job(10, 100.0, 2, 8, 3600.0, segment=2, segment_level="rack")

    def attempt(limits: Limits) -> tuple[list[workload.Job], Replay, dict[int, Placed]]:
        policy = policies.Topogang(cluster, "topogang+defrag", moves=limits)
        policy.prepare(gang)
        out = Replay(policy.name, True)
        now = {k: Placed(p.job, p.start, p.nodes, p.pods, dict(p.current), p.left, p.since) for k, p in running.items()}
        return _walk(cluster, [gang], policy, gang.arrival, used.copy(), pods.copy(), out, now, set()), out, now

    started, out, after = attempt(Limits())
    assert started == [gang]  # without --movable-elastic E's optional pod is given back: it stops
    assert out.moves == []
    assert sorted(after[1].current) == [0, 1]
    started, out, after = attempt(Limits(elastic=True))
    assert started == [gang]  # moved instead (moves come before the give-back), within block 0
    assert [(job, pod, node) for _, job, pod, node in out.moves] == [(1, 2, 4)]
    assert after[1].current == {0: 0, 1: 0, 2: 4}
    assert {int(cluster.rack_of[n]) for n in out.placed[gang.id].nodes} == {int(cluster.rack_of[2])}
