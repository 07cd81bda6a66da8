"""Defragmentation in the replay: which running pods may move, the server's search, its limits.

The `topogang+defrag` policy is topogang's, plus: a gang whose minimum does not fit while the
free GPUs would hold its pods has movable pods moved out of the way, found by the engine
functions the server's `extender.core.defrag.find_moves` calls (a ClusterState per attempt
would cost more than the replay): `find_victims` over the movable running pods, every one given
one flat priority (`defrag.FLAT`), then `closed_domain` and `relocate` for a new node outside the
gang's domain, a pod with none left out and the search run again, at most `defrag.MAX_ROUNDS`
times. Movable: the services (`Job.movable`), of a priority no higher than the gang's, not moved
within the cooldown; with `elastic`, also the pods beyond the minimum of an elastic job, each kept
in the domain it runs in at its job's finest required level, as the server keeps a moved gang
member (off by default: the server moves a gang member only when its workload says so). The limits are the
server's (`MoveSettings`): at most `per_hour` pods moved in any hour, a pod not moved twice
within `cooldown` seconds, a set larger than the hour has left refused whole.

A moved pod leaves its node and runs on its new node at once, its remaining run time unchanged
(no restart cost is modelled: a service that restarts elsewhere loses a few seconds, not its
work). One shortcut, whose answer is known: when the gang does not fit even with every movable
pod gone, there is no search (`find_victims` would find nothing).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from bench.tracesim.cluster import GPU
from bench.tracesim.gangs import NAMESPACE, pod_body, pod_name
from bench.tracesim.workload import Job
from extender.core.defrag import FLAT, MAX_ROUNDS
from extender.core.moves import HOUR, MoveSettings
from extender.model.pod import Placement, parse_pod
from extender.placement import (
    ClusterSnapshot,
    Gang,
    MovedPod,
    NodeTable,
    NoPreemption,
    Preemption,
    RunningPod,
    Stranded,
    Workload,
    closed_domain,
    find_victims,
    relocate,
)
from extender.placement.snapshot import Usage
from extender.placement.tree import BoolArray

# What happened to a gang whose minimum did not fit, once per walk that tried it.
OUTCOMES = {
    "moved": "pods moved and the gang started",
    "budget": "a move would help, beyond what the hour's budget has left",
    "none": "no movable pod of its priority or lower out of its cooldown runs",
    "blocked": "it does not fit even with every movable pod gone: work that stays blocks it",
    "nohelp": "the search found no set whose every pod has a new place",
    "stuck": "pods moved, yet the gang found no place after (a search the engine disagrees with)",
}


@dataclass(frozen=True)
class Limits:
    per_hour: int = MoveSettings().per_hour
    cooldown: float = MoveSettings().cooldown
    elastic: bool = False  # pods beyond an elastic job's minimum move too (within its own domain)


@dataclass(frozen=True)
class Candidate:
    """A running pod that may move: its job, its pod index, its node now, since when it runs."""

    job: Job
    index: int
    node: int
    started: float

    @property
    def key(self) -> str:
        return f"{NAMESPACE}/{pod_name(self.job, self.index)}"


def movable_pods(job: Job, current: dict[int, int], elastic: bool) -> Iterable[int]:
    """The pod indices of JOB (running on CURRENT) that may move."""
    if job.movable:
        return current.keys()
    if elastic and job.elastic:
        return [i for i in current if i >= job.min_pods]
    return ()


class Mover:
    """The limiter (extender.core.moves' rules on the replay's clock) and what the searches found."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._times: deque[float] = deque()
        self._cool: dict[str, float] = {}
        self._placement: dict[int, Placement] = {}  # GPUs a pod -> a plain pod's Placement (all alike)
        self.log: list[tuple[int, str]] = []  # (job, outcome) per gang that did not fit (OUTCOMES)

    def room_left(self, now: float) -> int:
        while self._times and self._times[0] <= now - HOUR:
            self._times.popleft()
        return max(0, self.limits.per_hour - len(self._times))

    def cooling(self, key: str, now: float) -> bool:
        return self._cool.get(key, -1.0) > now

    def moved(self, keys: Iterable[str], now: float) -> None:
        for key in keys:
            self._times.append(now)
            self._cool[key] = now + self.limits.cooldown

    def eligible(self, candidates: Iterable[Candidate], job: Job, now: float) -> list[Candidate]:
        """Those the server would offer for JOB: priority no higher than its, not cooling down."""
        return [c for c in candidates if c.job.priority <= job.priority and not self.cooling(c.key, now)]

    def search(
        self, table: NodeTable, usage: Usage, gang: Gang, candidates: list[Candidate]
    ) -> Preemption | NoPreemption:
        """The server's move search (extender.core.defrag.find_moves) over CANDIDATES."""
        snapshot = ClusterSnapshot(table, usage)
        names = table.nodes
        by_key = {c.key: c for c in candidates}
        workloads = [
            Workload(c.key, FLAT, (RunningPod(c.key, names[c.node].name, _requests(c.job), c.started),), gang=False)
            for c in candidates
        ]
        found: Preemption | NoPreemption = NoPreemption(gang.key, "no movable pod")
        for _ in range(MAX_ROUNDS):
            found = find_victims(snapshot, gang, FLAT + 1, workloads)
            if isinstance(found, NoPreemption):
                return found
            closed = closed_domain(snapshot, gang, found.domain, found.plan)
            moved = [self._moved(table, gang, by_key[k], names[by_key[k].node].name) for k in found.pods]
            where = relocate(snapshot, gang, found.plan, closed, moved)
            if not isinstance(where, Stranded):
                return dataclasses.replace(found, moves=where)
            workloads = [w for w in workloads if w.key != where.pod]
            if not workloads:
                break
        return NoPreemption(gang.key, "a pod that would be moved has no place elsewhere")

    def _moved(self, table: NodeTable, gang: Gang, c: Candidate, node: str) -> MovedPod:
        placement = self._placement.get(c.job.gpus)
        if placement is None:  # what the server reads from the pod: no selector, no affinity
            placement = self._placement[c.job.gpus] = parse_pod(pod_body(c.job, c.index, node)).placement
        return MovedPod(c.key, node, _requests(c.job), placement, within=_within(table, gang, c))


def _within(table: NodeTable, gang: Gang, c: Candidate) -> BoolArray | None:
    """The nodes a gang member may move to, as the server decides (extender/core/movable_members.py):
    the domain it runs in at the finest required level of its own job (its segment's, else the
    job's); None for a service or an unconstrained job. (One Topology: the waiting gang's tree.)"""
    level = c.job.segment_level if c.job.segment and c.job.segment_level else c.job.job_level
    if c.job.movable or not level:
        return None
    tree = table.tree(gang.topology)
    at = next((lv for lv in range(1, tree.depth) if tree.level_name(lv) == level), None)
    if at is None:
        return None
    of_node = tree.levels[at].domain_of_node
    mask: BoolArray = of_node == of_node[c.node]
    return mask


def _requests(job: Job) -> dict[str, int]:
    """A pod's requests in milli-units, as the replay's usage counts them."""
    return {GPU: job.gpus * 1000, "pods": 1000}
