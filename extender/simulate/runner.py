"""The simulation: kube-scheduler's scheduling loop, emulated, around the real GangScheduler.

For each pending pod, in the order kube-scheduler's queue meets them (higher priority first,
then older, then the order read), the loop does what kube-scheduler does with an extender:
its own filters (readiness, taints, selectors, resources against bound and assumed pods),
then topogang's filter, prioritize and bind. A pod waiting at the bind gate is *assumed* on its
node, as kube-scheduler assumes it. Passes repeat while anything moves, as kube-scheduler
retries unschedulable pods when the cluster changes. No clock: time advances one tick a call.

A gang member that no node takes goes through kube-scheduler's preemption, which asks topogang:
when topogang chooses victims for the gang, they are evicted at once (their pods deleted, as a
grace period of 0 would) and listed in the result. Plain pods never preempt here. Pods moved for
a gang (defragmentation) leave the same way; each one's replacement (`<name>-moved`) is created
at once, as its controller would, and scheduled like any pod into the room held for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from extender.core.apply import DEFAULT_NAMESPACE, apply_object
from extender.core.cluster import ClusterState, ObjectKey, object_key
from extender.core.decisions import BIND, INVALID, PENDING, R_INVALID, REJECT, WAIT, PlanEvent
from extender.core.reservations import Settings
from extender.core.scheduler import GangScheduler
from extender.core.standing import GroupStatus
from extender.core.usage import UsageLedger
from extender.grouping import Family, ObjectIndex, can_synthesize, synthesize
from extender.model.errors import InvalidObject
from extender.model.keys import GroupKey
from extender.model.labels import POD_GROUP_ANNOTATION, POD_GROUP_LABEL
from extender.model.pod import PodInfo, parse_pod
from extender.placement import DomainRef
from extender.simulate.coverage import (
    key_of,
    made_by_controller,
    owned_by_pod,
    owner_chains,
    replicaset_owners,
    unused,
)
from extender.simulate.loader import InputError, Loaded
from extender.simulate.order import queue_key

TICK = 0.001  # seconds of simulated time per scheduling call


@dataclass(frozen=True)
class PodOutcome:
    namespace: str
    name: str
    labels: dict[str, str]
    group: str | None
    subgroup: str | None
    node: str | None
    reason: str = ""


@dataclass(frozen=True)
class Preempted:
    pod: str  # namespace/name of the victim
    by: str  # the gang it made room for
    domain: DomainRef
    moved_to: str = ""  # defragmentation: the node held for its replacement (else it was preempted)


@dataclass
class SimResult:
    pods: list[PodOutcome]
    groups: list[GroupStatus]
    events: list[PlanEvent]
    state: ClusterState
    warnings: list[str] = field(default_factory=list)
    preempted: list[Preempted] = field(default_factory=list)

    @property
    def invalid(self) -> list[str]:
        """The gangs (and workloads whose pods could not be made) that are Invalid."""
        return [g.key for g in self.groups if g.phase == INVALID]


class Simulation:
    def __init__(self, objects: Sequence[Loaded]) -> None:
        self.state = ClusterState()
        # Reservations as the server's defaults make them: the simulator shows who would hold room.
        self.scheduler = GangScheduler(self.state, plan_ttl=float("inf"), reservations=Settings())
        self.order: dict[str, int] = {}  # pod -> the order read
        self.running: set[str] = set()  # pods that were already bound in the input
        self.warnings: list[str] = []
        self.preempted: list[Preempted] = []
        self.invalid: list[GroupStatus] = []  # workloads whose pods could not be made
        self._load(objects)

    # -- input ----------------------------------------------------------------------------------

    def _load(self, objects: Sequence[Loaded]) -> None:
        for obj in objects:
            try:
                self._add(obj)
            except InvalidObject as exc:
                raise InputError(f"{obj.source}: {exc}") from None
        made = self._synthesize(objects)
        used = made | owner_chains(self.state, self.state.pods.values())
        self.warnings += unused(objects, self.state, self.scheduler.lookup, used)

    def _synthesize(self, objects: Sequence[Loaded]) -> set[ObjectKey]:
        """A workload given without pods gets the pods (and intermediate owners, such as a
        JobSet's Jobs) its controller would create; pods and owners given in the input are used
        as they are. Returns the workloads whose pods were made (or that were found Invalid)."""
        with_pods = self.scheduler.lookup.families()
        # the owners of the pods given, and the Deployments given with a ReplicaSet (whose pods
        # are made, not a second set): their pods are not made again
        owning = owner_chains(self.state, self.state.pods.values()) | replicaset_owners(objects)
        latest = {key_of(obj): obj for obj in objects}  # an object given twice: the later one, as kubectl applies
        given = ObjectIndex(obj.body for obj in latest.values())  # what a synthesis may read (a TrainJob's runtime)
        made: set[ObjectKey] = set()
        # objects a pod owns (a LeaderWorkerSet's workers) last, once the pods they hang from are made
        for obj in sorted(objects, key=owned_by_pod):
            meta = obj.body.get("metadata") or {}
            name, ns = meta.get("name"), meta.get("namespace") or "default"
            if not can_synthesize(obj.api_version, obj.kind) or Family(obj.kind, GroupKey(ns, str(name))) in with_pods:
                continue
            if (key := key_of(obj)) in owning or latest[key] is not obj:
                continue
            made.add(key)
            if made_by_controller(obj, latest.keys(), self.state.pods.keys()):
                continue  # a JobSet's Job, an LWS's StatefulSet: given with it, made by its synthesis
            try:
                synthesized = synthesize(obj.body, objects=given)
            except InvalidObject as exc:  # this workload is Invalid; the others are simulated
                group = str(GroupKey(ns, f"{str(obj.kind).lower()}-{name}"))
                self.invalid.append(GroupStatus(group, INVALID, f"{obj.source}: {exc}", reason=R_INVALID))
                continue
            made.update(
                object_key(api, kind, namespace or DEFAULT_NAMESPACE, read)
                for api, kind, namespace, read in synthesized.read
                if given.get(api, kind, namespace, read) is not None
            )
            try:
                for owner in synthesized.owners:
                    if self._given(owner):
                        continue  # given in the input (a Grove PodGang as Grove wrote it): used as it is
                    apply_object(self.scheduler, owner)
                for body in synthesized.pods:
                    pod = parse_pod(body)
                    self.order[pod.key] = len(self.order)
                    self.scheduler.observe_pod(pod)
            except InvalidObject as exc:
                raise InputError(f"{obj.source}: {exc}") from None
        return made

    def _given(self, owner: Mapping[str, Any]) -> bool:
        meta = owner.get("metadata") or {}
        api, kind = str(owner.get("apiVersion")), str(owner.get("kind"))
        return object_key(api, kind, meta.get("namespace"), str(meta.get("name"))) in self.state.objects

    def _add(self, obj: Loaded) -> None:
        if obj.kind != "Pod":
            apply_object(self.scheduler, obj.body)  # the live cache maps objects the same way
            return
        pod = parse_pod(obj.body)
        if pod.key in self.state.pods:
            raise InputError(f"{obj.source}: Pod {pod.key} is defined twice")
        self.order[pod.key] = len(self.order)
        if pod.node_name:
            self.running.add(pod.key)
        self.scheduler.observe_pod(pod)

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> SimResult:
        now = 0.0
        events: list[PlanEvent] = []
        assumed: dict[str, str] = {}
        reasons: dict[str, str] = {}
        moved = True
        while moved:
            moved = False
            for key in self._queue():
                pod = self.state.pods[key]
                if pod.node_name is not None or key in assumed:
                    continue
                if pod.scheduling_gates:  # kube-scheduler keeps a gated pod out of its queue
                    reasons[key] = gated(pod)
                    continue
                now += TICK
                candidates, why = self._scheduler_filter(pod, assumed)
                if not candidates:
                    reasons[key] = why
                    event = self.scheduler.preempt(key, now)  # kube-scheduler's PostFilter asks
                    if event is not None:
                        events.append(event)
                        moved = self._evict(event) or moved
                    continue
                result = self.scheduler.filter(pod, candidates, now)
                if result.event is not None:
                    events.append(result.event)
                    moved = self._evict(result.event) or moved
                if not result.nodes:
                    reasons[key] = result.reason or "no node"
                    continue
                node = self._pick(pod, result.nodes, self.scheduler.prioritize(pod, result.nodes))
                decision = self.scheduler.bind(key, node, now)
                if decision.action == WAIT:
                    assumed[key] = node
                    moved = True
                elif decision.action == BIND:
                    for pod_key, target in decision.bind:
                        assumed.pop(pod_key, None)
                        reasons.pop(pod_key, None)
                        self.scheduler.observe_pod(replace(self.state.pods[pod_key], node_name=target, phase="Running"))
                    moved = True
                elif decision.action == REJECT:
                    reasons[key] = decision.error
        # Pods still at the gate: the rest of their minimum never came, so the gate times out.
        for group in sorted({g for k in assumed if (g := self.scheduler.lookup.group_of(k))}):
            for key in self.scheduler.gate_timeout(group, 0):
                reasons[key] = self.scheduler.reasons.text(group, "bind gate timed out")
        self.scheduler.refresh_reservations(now, self._wall())
        return self._result(events, reasons)

    def _wall(self) -> float | None:
        """The moment the input shows (its latest creation or start time): the wall clock of the
        reservations' estimates, so that a run gives the same answer twice. None without any:
        the input has no clock, and 0 would be shown as 1970."""
        times = [t for p in self.state.pods.values() for t in (p.created, p.started) if t is not None]
        return max(times, default=None)

    def _evict(self, event: PlanEvent) -> bool:
        """The victims of a preemption plan leave at once; True when some did."""
        p = event.preemption
        if p is None:
            return False
        for key in p.pods:
            if key in self.state.pods:
                old = self.state.pods[key]
                self.scheduler.delete_pod(key)
                self.preempted.append(Preempted(key, event.group, p.domain, p.moves.get(key, "")))
                if key in p.moves:  # its controller makes a replacement at once, not bound yet
                    new = replace(old, name=f"{old.name}-moved", uid="", node_name=None, phase="Pending")
                    self.order[new.key] = len(self.order)
                    self.scheduler.observe_pod(new)
        return bool(p.pods)

    def _queue(self) -> list[str]:
        """kube-scheduler's PrioritySort: priority, then age, then the order read. A gang's
        members go by the gang's priority (its pods' highest, or its PodGroup's priorityClassName)
        and age, so gangs are handled one after another in that order."""
        scheduler = self.scheduler

        def key(k: str) -> tuple[int, float, int]:
            pod = self.state.pods[k]
            priority, created = self.state.pod_priority(pod), pod.created
            group = scheduler.lookup.group_of(k)
            if group is not None:
                view = scheduler.lookup.view(group)
                priority, created = max(priority, view.priority), view.created
            return queue_key(priority, created, self.order.get(k, 0))

        return sorted((k for k in self.state.pods if k not in self.running), key=key)

    def _scheduler_filter(self, pod: PodInfo, assumed: dict[str, str]) -> tuple[list[str], str]:
        """kube-scheduler's own filters: eligibility, and resources against bound + assumed pods."""
        table = self.state.table
        if not len(table):
            return [], "0/0 nodes are available"
        mask = table.eligibility(pod.placement).mask.copy()
        ledger = UsageLedger(table)
        for key, node in assumed.items():
            ledger.add(node, self.state.pods[key].requests)
        eligible = mask.copy()
        short: list[str] = []
        for resource, need in sorted(pod.requests.items()):
            free = table.alloc(resource) - self.state.bound.used(resource) - ledger.used(resource)
            if (held := self.state.devices.allocated(resource, table.nodes)) is not None:
                free = free - held  # devices claims in the input hold (their status.allocation)
            ok = free >= need
            # as kube-scheduler counts: each eligible node that lacks this resource, whatever else it lacks
            lacking = int(np.count_nonzero(eligible & ~ok))
            if lacking:
                short.append(f"{lacking} insufficient {resource}")
            mask &= ok
        names = [table.nodes[i].name for i in np.flatnonzero(mask)]
        ineligible = len(table) - int(np.count_nonzero(eligible))
        parts = short + ([f"{ineligible} not eligible (taints, selectors, readiness)"] if ineligible else [])
        why = f"0/{len(table)} nodes are available" + (f": {', '.join(parts)}" if parts else "")
        return names, why

    def _pick(self, pod: PodInfo, nodes: list[str], scores: list[tuple[str, int]]) -> str:
        """The extender's top score wins; otherwise the least allocated node, then the name."""
        if scores:
            return min(scores, key=lambda s: (-s[1], s[0]))[0]

        def free_share(node: str) -> tuple[float, str]:
            info = self.state.nodes[node]
            shares = [
                (self.state.free_on(node, r) - v) / a
                for r, v in pod.requests.items()
                if (a := info.allocatable.get(r, 0)) > 0 and r != "pods"
            ]
            return (-(sum(shares) / len(shares)) if shares else 0.0, node)

        return min(nodes, key=free_share)

    # -- output ---------------------------------------------------------------------------------

    def _result(self, events: list[PlanEvent], reasons: dict[str, str]) -> SimResult:
        scheduler = self.scheduler
        leaf_of: dict[str, str] = {}
        for group in scheduler.lookup.groups():
            view = scheduler.lookup.view(group)
            gang = view.built.gang if view.built else None
            if gang is not None:
                for scope in gang.scopes:
                    for m in scope.members:
                        leaf_of[m.key] = scope.name
        pods = []
        for key in sorted(self.order, key=self.order.__getitem__):
            if key in self.running:
                continue
            pod = self.state.pods[key]
            pod_group = scheduler.lookup.group_of(key)
            if pod.node_name is None and key not in reasons and pod_group is not None:
                reasons[key] = self.scheduler.status(pod_group).message
            pods.append(
                PodOutcome(
                    pod.namespace,
                    pod.name,
                    dict(pod.labels),
                    pod_group,
                    leaf_of.get(key) or None,
                    pod.node_name,
                    "" if pod.node_name else reasons.get(key, ""),
                )
            )
        # PodGroup objects no pod joins are shown too: they wait for their pods
        named = set(self.state.podgroups) | set(self.state.invalid_podgroups)
        groups = [self._status(g) for g in sorted(set(scheduler.lookup.groups()) | named)] + self.invalid
        return SimResult(pods, groups, events, self.state, self.warnings, self.preempted)

    def _status(self, group: str) -> GroupStatus:
        status = self.scheduler.status(group)
        if status.phase != PENDING or status.pods or self.scheduler.lookup.has_pods(group):
            return status
        name = GroupKey.parse(group).name
        names = f"label {POD_GROUP_LABEL}: {name}, or annotation {POD_GROUP_ANNOTATION}: {name}"
        hint = f"waiting for its pods: no pod names it ({names})"
        return replace(status, warnings=(*status.warnings, hint))


def gated(pod: PodInfo) -> str:
    gates = ", ".join(pod.scheduling_gates)
    return f"not scheduled: spec.schedulingGates holds {gates} (kube-scheduler waits until it is removed)"


def simulate(objects: Sequence[Loaded]) -> SimResult:
    return Simulation(objects).run()
