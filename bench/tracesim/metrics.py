"""The figures of one replay.

allocation, allocation_p10   GPUs in use / schedulable GPUs, time-weighted mean and 10th
                             percentile over the measured window: from the arrival of the
                             job at `warmup` of the trace to the last arrival (the filling
                             and the draining of the cluster are left out)
racks_at_lower_bound         share of the placed jobs that use no more racks than the fewest
                             that could hold their GPUs (ceil(GPUs / rack GPUs), the largest
                             racks first when racks differ)
racks_over_bound             mean of racks used / that lower bound
stranded_gpus                free GPUs inside partly used racks, time-weighted mean over the
                             window (free room that only jobs smaller than a rack can use)
broken_required              required constraints a placement broke (a segment across racks, a
                             job across its required block or zone)
wait_{p50,p95,p99,max}_<size>_s  start - arrival in seconds, by size: small (fits one rack),
                             medium (fits one block), large (more); of the jobs that arrived in
                             the measured window
slowdown_{mean,p99}_<size>   (wait + run) / run, same jobs
wait_p99_large_{lowest,above}_s  large jobs' p99 wait at the trace's lowest priority and above it:
                             the class's p99 is nearly always a lowest-priority gang's, queued
                             behind higher-priority work that no rule may make wait for it
drain_{p50,p99}_<size>_s     medium and large: the jobs' drain (bench/tracesim/replay.py), the
                             part of their wait that holding room from their arrival could not
                             save; the policy's own past decides it
held_idle_gpu_h              GPU-hours held idle by reservations in the window (free GPUs in
                             reserved domains, which other work could have used)
backfilled_gpu_h             GPU-hours of bounded jobs that started in held room in the window
reservations                 reservations made; estimate_error_p50_s: |estimated - actual start|
                             of the reserved gangs that started, median
wait_p99_top_s, wait_max_top_s  gangs of the trace's highest priority, every size: what a maximum
                             wait for the others costs them
over_bound_max_s, over_bound_jobs  with a maximum wait: the largest excess of a gang's wait over
                             its maximum plus its overdue drain (bench/tracesim/replay.py; <= 0:
                             every gang within the bound), and how many gangs exceeded it
slot_wait_p99_s              with a maximum wait: overdue gangs' time from becoming overdue to first
                             holding room; over_bound_slot_share: of the gangs beyond the bound, the
                             share whose excess that wait for a slot explains
overdue_jobs                 with a maximum wait: gangs that became overdue (arrived in the window)
estimate_err_{p50,p90}_<size>  |first estimated start - actual start| / actual wait, median and
                             90th percentile, of the gangs that waited and got an estimate
                             (extender.core.estimates, at the first pass that found them queued);
                             estimated_<size>: how many
moves, moves_per_hour        topogang+defrag: pods moved in the window, and per hour of it
moves_per_100_gpu_h          pods moved per 100 GPU-hours of work run in the window
defrag_<size>_<outcome>      topogang+defrag: tries for gangs of that size (arrived in the window)
                             that did not fit, by outcome (bench/tracesim/defrag.py OUTCOMES)
defrag_large_waited, defrag_large_only_blocked  large gangs (in the window) that did not fit at
                             once, and of them those whose every try was blocked by work that
                             stays (moving every movable pod would not have let them fit)
plan_ms_p99                  time of one call into the policy (a placement or a refusal)
reserve_ms_p99               time of one reserve() pass (topogang+reserve: after each walk)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bench.tracesim.cluster import Cluster
from bench.tracesim.defrag import OUTCOMES
from bench.tracesim.replay import Placed, Replay
from bench.tracesim.workload import Job, window

SIZES = ("small", "medium", "large")
SPREAD = (
    "allocation",
    "racks_at_lower_bound",
    "wait_p99_small_s",
    "wait_p99_medium_s",
    "wait_p99_large_s",
    "drain_p99_large_s",
    "wait_p99_top_s",
    "over_bound_max_s",
)
MAXIMA = ("over_bound_max_s", "wait_max_top_s")


def lower_bound(cluster: Cluster, gpus: int) -> int:
    caps = np.sort(cluster.rack_gpus())[::-1]
    return int(np.searchsorted(np.cumsum(caps), gpus)) + 1


def size_class(cluster: Cluster, job: Job) -> str:
    if job.demand <= int(cluster.domain_gpus("rack").max()):
        return "small"
    return "medium" if job.demand <= int(cluster.domain_gpus("block").max()) else "large"


def broken(cluster: Cluster, job: Job, nodes: tuple[int, ...], pods: tuple[int, ...] = ()) -> int:
    """Required constraints this placement breaks (PODS: the pod index of each of NODES; all in
    order when empty)."""
    count = 0
    where = np.array(nodes)
    if job.segment:
        dom = cluster.domain_of(job.segment_level)[where]
        segment = np.array(pods or range(len(nodes))) // job.segment
        for k in np.unique(segment).tolist():
            count += int(len(np.unique(dom[segment == k])) > 1)
    if job.job_level:
        count += int(len(np.unique(cluster.domain_of(job.job_level)[where])) > 1)
    return count


def _weighted(values: np.ndarray[Any, Any], weights: np.ndarray[Any, Any], q: float) -> float:
    order = np.argsort(values)
    cum = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cum, q * cum[-1])])


def summarize(cluster: Cluster, jobs: list[Job], run: Replay, warmup: float = 0.1) -> dict[str, Any]:
    t0, t1 = window(jobs, warmup)
    times = np.array([*run.times, np.inf])
    span = np.clip(times[1:], t0, t1) - np.clip(times[:-1], t0, t1)  # each state's share of the window
    use = np.array(run.used) / cluster.capacity
    stranded = np.array(run.stranded, dtype=float)
    ok = span > 0
    placed = list(run.placed.values())
    racks = np.array([len(set(cluster.rack_of[list(p.nodes)].tolist())) for p in placed])
    bound = np.array([lower_bound(cluster, len(p.nodes) * p.job.gpus) for p in placed])
    waits: dict[str, list[float]] = {s: [] for s in SIZES}
    arrival = {j.id: j.arrival for j in jobs}
    classes = {j.id: size_class(cluster, j) for j in jobs if j.id in run.drain}
    slow: dict[str, list[float]] = {s: [] for s in SIZES}
    for p in placed:
        if t0 <= p.job.arrival <= t1:
            wait = p.start - p.job.arrival
            waits[size_class(cluster, p.job)].append(wait)
            slow[size_class(cluster, p.job)].append((wait + p.job.duration) / max(p.job.duration, 1.0))
    row: dict[str, Any] = {
        "policy": run.policy,
        "allocation": round(float((use[ok] * span[ok]).sum() / span[ok].sum()), 4),
        "allocation_p10": round(_weighted(use[ok], span[ok], 0.10), 4),
        "racks_at_lower_bound": round(float((racks <= bound).mean()), 4),
        "racks_over_bound": round(float((racks / bound).mean()), 3),
        "stranded_gpus": round(float((stranded[ok] * span[ok]).sum() / span[ok].sum()), 1),
        "broken_required": sum(broken(cluster, p.job, p.nodes, p.pods) for p in placed),
        "topology_aware": run.aware,
    }
    for s in SIZES:
        w = np.array(waits[s]) if waits[s] else np.zeros(1)
        for q in (50, 95, 99):
            row[f"wait_p{q}_{s}_s"] = round(float(np.percentile(w, q)), 1)
        row[f"wait_max_{s}_s"] = round(float(w.max()), 1)
        sd = np.array(slow[s]) if slow[s] else np.ones(1)
        row[f"slowdown_mean_{s}"] = round(float(sd.mean()), 2)
        row[f"slowdown_p99_{s}"] = round(float(np.percentile(sd, 99)), 1)
        row[f"jobs_{s}"] = len(waits[s])
    row |= _large_by_priority(cluster, jobs, placed, t0, t1)
    row |= _bounded_waits(cluster, jobs, run, t0, t1)
    for s in SIZES[1:]:
        d = [v for jid, v in run.drain.items() if t0 <= arrival[jid] <= t1 and classes[jid] == s and v < np.inf]
        dd = np.array(d) if d else np.zeros(1)
        row[f"drain_p50_{s}_s"] = round(float(np.percentile(dd, 50)), 1)
        row[f"drain_p99_{s}_s"] = round(float(np.percentile(dd, 99)), 1)
    held = np.array(run.held_idle, dtype=float) if run.held_idle else np.zeros(len(span))
    row["held_idle_gpu_h"] = round(float((held[ok] * span[ok]).sum()) / 3600, 1)
    row["backfilled_gpu_h"] = round(sum(g for t, g in run.backfilled if t0 <= t <= t1) / 3600, 1)
    row["reservations"] = run.reservations
    errors = [abs(est - start) for _, est, start in run.estimates]
    row["estimate_error_p50_s"] = round(float(np.median(errors)), 1) if errors else 0.0
    row["plan_ms_p99"] = round(float(np.percentile(run.plan_ms, 99)), 3) if run.plan_ms else 0.0
    row["plan_calls"] = len(run.plan_ms)
    row["reserve_ms_p99"] = round(float(np.percentile(run.reserve_ms, 99)), 3) if run.reserve_ms else 0.0
    row["placed"] = len(placed)
    row["optional_grown"] = run.grown
    row["optional_given_back"] = run.given_back
    row["never_placed"] = len(run.never)
    row |= _moves(cluster, jobs, run, t0, t1, float((use[ok] * span[ok]).sum()) * cluster.capacity)
    row["overcommitted"] = run.overcommitted
    return row


def _moves(cluster: Cluster, jobs: list[Job], run: Replay, t0: float, t1: float, gpu_s: float) -> dict[str, Any]:
    """The figures of pods moved (topogang+defrag; zeros for the other policies)."""
    moved = sum(1 for t, *_ in run.moves if t0 <= t <= t1)
    out: dict[str, Any] = {
        "moves": moved,
        "moves_per_hour": round(moved / max((t1 - t0) / 3600, 1e-9), 3),
        "moves_per_100_gpu_h": round(moved / max(gpu_s / 3600 / 100, 1e-9), 4),
    }
    by_id = {j.id: j for j in jobs}
    tries: dict[int, list[str]] = {}
    for jid, outcome in run.defrag:
        if t0 <= by_id[jid].arrival <= t1:
            tries.setdefault(jid, []).append(outcome)
    for s in SIZES:
        for outcome in OUTCOMES:
            out[f"defrag_{s}_{outcome}"] = sum(
                v.count(outcome) for jid, v in tries.items() if size_class(cluster, by_id[jid]) == s
            )
    large = [v for jid, v in tries.items() if size_class(cluster, by_id[jid]) == "large"]
    out["defrag_large_waited"] = len(large)
    out["defrag_large_only_blocked"] = sum(1 for v in large if set(v) == {"blocked"})
    return out


def _large_by_priority(
    cluster: Cluster, jobs: list[Job], placed: list[Placed], t0: float, t1: float
) -> dict[str, float]:
    lowest = min((j.priority for j in jobs), default=0)
    waits: dict[bool, list[float]] = {True: [], False: []}
    for p in placed:
        if t0 <= p.job.arrival <= t1 and size_class(cluster, p.job) == "large":
            waits[p.job.priority == lowest].append(p.start - p.job.arrival)
    return {
        f"wait_p99_large_{name}_s": round(float(np.percentile(w, 99)), 1) if w else 0.0
        for name, w in (("lowest", waits[True]), ("above", waits[False]))
    }


def _bounded_waits(cluster: Cluster, jobs: list[Job], run: Replay, t0: float, t1: float) -> dict[str, float]:
    """What a maximum wait promises and costs (the figures above from wait_p99_top_s on)."""
    top = max((j.priority for j in jobs), default=0)
    placed = [p for p in run.placed.values() if t0 <= p.job.arrival <= t1]
    tops = np.array([p.start - p.job.arrival for p in placed if p.job.priority == top] or [0.0])
    out: dict[str, float] = {
        "wait_p99_top_s": round(float(np.percentile(tops, 99)), 1),
        "wait_max_top_s": round(float(tops.max()), 1),
    }
    if run.max_wait is not None:
        excess = [
            p.start - p.job.arrival - run.max_wait - run.overdue_drain[p.job.id]
            for p in placed
            if p.job.id in run.overdue_drain
        ]
        out["over_bound_max_s"] = round(max(excess, default=-run.max_wait), 1)
        out["over_bound_jobs"] = sum(1 for e in excess if e > 1.0)
        out["overdue_jobs"] = len(excess)
        # Why beyond: the time from becoming overdue to first holding room (one slot, gangs overdue longer first)
        slot = {
            p.job.id: run.slotted.get(p.job.id, p.start) - (p.job.arrival + run.max_wait)
            for p in placed
            if p.job.id in run.overdue_drain
        }
        beyond = [(e, slot[jid]) for e, jid in zip(excess, slot, strict=True) if e > 1.0]
        out["over_bound_slot_share"] = (
            round(sum(1 for e, w in beyond if w >= e - 1.0) / len(beyond), 3) if beyond else 0.0
        )
        waited = np.array(list(slot.values()) or [0.0])
        out["slot_wait_p99_s"] = round(float(np.percentile(waited, 99)), 1)
    start = {p.job.id: p for p in placed}
    errors: dict[str, list[float]] = {s: [] for s in SIZES}
    for jid, estimate, began in run.estimated:
        p = start.get(jid)
        if p is None or estimate == np.inf or began <= p.job.arrival:
            continue
        errors[size_class(cluster, p.job)].append(abs(estimate - began) / (began - p.job.arrival))
    for s in SIZES:
        e = np.array(errors[s]) if errors[s] else np.zeros(1)
        out[f"estimate_err_p50_{s}"] = round(float(np.percentile(e, 50)), 3)
        out[f"estimate_err_p90_{s}"] = round(float(np.percentile(e, 90)), 3)
        out[f"estimated_{s}"] = len(errors[s])
    return out


def combine(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for several traces: the mean of each figure, the sum of each count."""
    out = dict(rows[0])
    for key, value in rows[0].items():
        if isinstance(value, (bool, str)):
            continue
        values = [r[key] for r in rows]
        out[key] = sum(values) if isinstance(value, int) else round(sum(values) / len(values), 4)
    out["traces"] = len(rows)
    for key in MAXIMA:  # the bound holds on every trace or not: the worst one
        if key in out:
            out[key] = max(r[key] for r in rows)
    for key in SPREAD:  # one trace's p99 of a few dozen large gangs is nearly its maximum: show the spread
        if key in rows[0]:
            out[f"{key}_per_trace"] = [r[key] for r in rows]
    return out
