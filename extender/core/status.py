"""Where each gang stands: its phase, the reason as data, counts per scope and the domains held.

Read from the other parts (membership, plans, reasons, preemptions and repairs) when an edge asks
(the PodGroup writer, `explain`, the simulator); it keeps no state of its own. The message is
not written here: `GroupStatus.message` composes it from the data when it is read.
"""

from __future__ import annotations

from collections.abc import Iterable

from extender.core.cluster import ClusterState
from extender.core.decisions import (
    FINISHED,
    INVALID,
    PENDING,
    R_FINISHED,
    R_GANG_INCOMPLETE,
    R_INVALID,
    R_PARTIAL_EVICTED,
    R_PLANNED,
    R_QUEUE_NOT_FOUND,
    R_SCHEDULED,
    R_WAITING,
    SCHEDULED,
)
from extender.core.evicted import REPAIRED
from extender.core.membership import GroupView, Membership
from extender.core.plans import GroupPlan, Plans
from extender.core.preempting import Preempting
from extender.core.queues import queue_problem
from extender.core.reasons import Reasons
from extender.core.repairing import Repairs
from extender.core.reserving import Reserving
from extender.core.standing import Bound, Finished, GroupStatus, NotPlanned, Planned, QueueBlocked, Said, SubGroupStatus
from extender.model.errors import FieldError, said_once_text
from extender.placement import build_gang, incomplete, meets_minimum, minimum_pods


def queue_of(state: ClusterState, view: GroupView) -> tuple[str | None, str | None]:
    """(why GROUP must wait for its queue, or None; a warning about its queue, or None)."""
    spec = view.spec
    if spec is None or not spec.queue:
        return None, None
    return queue_problem(spec.queue, spec.namespace, state.queue_apis, state.queues)


class Status:
    def __init__(
        self,
        state: ClusterState,
        membership: Membership,
        plans: Plans,
        reasons: Reasons,
        preempting: Preempting,
        repairs: Repairs,
        reserving: Reserving,
    ) -> None:
        self._state = state
        self._membership = membership
        self._plans = plans
        self._reasons = reasons
        self._preempting = preempting
        self._repairs = repairs
        self._reserving = reserving

    def of(self, group: str) -> GroupStatus:
        """Where GROUP stands. A PodGroup object that no pod joins yet has a status too (pending
        with 0 pods, or invalid)."""
        view = self._membership.view(group) if self._membership.has(group) else self._view_without_pods(group)
        pods = [self._state.pods[k] for k in view.pods if k in self._state.pods]
        bound = sum(1 for p in pods if p.node_name is not None)
        if not view.valid:
            return GroupStatus(group, INVALID, view.message, len(pods), 0, bound, reason=R_INVALID)
        minimum = minimum_pods(view.built.gang) if view.built is not None and view.built.gang is not None else 0
        if pods and all(p.terminal for p in pods):
            # The workload ran: its pods are done, not missing.
            succeeded = sum(1 for p in pods if p.phase == "Succeeded")
            finished = (Finished(succeeded, len(pods) - succeeded),)
            return GroupStatus(
                group, FINISHED, pods=len(pods), bound=bound, minimum=minimum, reason=R_FINISHED, said=finished
            )
        gp = self._plans.get(group)
        said, phase, reason = self._standing(view, gp, {p.key for p in pods if p.node_name is not None})
        _, queue_warning = queue_of(self._state, view)
        # A planning attempt failed: pods missing is no attempt (KAI does not try an incomplete gang).
        why = self._reasons.get(group)
        failed = why is not None and reason == why.kind and reason != R_GANG_INCOMPLETE
        repaired = self._repairs.last.get(group)
        evicted = self._preempting.evicted.of(group)
        held = self._reserving.of(group) if phase == PENDING else None
        late = self._reserving.overdue_of(group) if phase == PENDING else None
        expected = self._reserving.expected(group) if phase == PENDING and gp is None else None
        said = (*said, *(x for x in (late, held, expected) if x is not None))
        warned = tuple(p.runtime_bound_error for p in pods if p.runtime_bound_error)
        return GroupStatus(
            group,
            phase,
            pods=len(pods),
            planned=bound + (len(gp.reserved) + len(gp.expected) if gp else 0),
            bound=bound,
            minimum=minimum,
            subgroups=tuple(self._subgroups(view, gp)),
            domains=dict(self._plans.domains(group)),
            reason=reason,
            node_pool_unschedulable=failed and view.spec is not None and view.spec.scheduling_backoff == 1,
            last_repair=repaired.message if repaired else "",
            last_eviction=evicted.render() if evicted is not None and evicted.cause != REPAIRED else "",
            said=said,
            waiting=tuple(sorted(view.waiting.items())),
            warnings=said_once_text((*view.warnings, *([queue_warning] if queue_warning else []), *warned)),
            reservation=held,
            overdue=late,
            expected=expected,
        )

    def _standing(self, view: GroupView, gp: GroupPlan | None, bound: set[str]) -> tuple[tuple[Said, ...], str, str]:
        """(what the message says, the phase, the reason) of a valid gang not finished."""
        group = view.key
        why = self._reasons.get(group)
        gang = view.built.gang if view.built is not None else None
        if gang is not None and bound and meets_minimum(gang, bound):
            return (Bound(len(bound)), *([why] if why is not None else [])), SCHEDULED, R_SCHEDULED
        if gp is not None:
            unbound = len([p for p in gp.gate.minimum if p in gp.reserved])
            return (Planned(unbound, len(gp.expected)),), PENDING, R_PLANNED
        blocked, _ = queue_of(self._state, view)
        if blocked is not None:
            return (QueueBlocked(group, blocked),), PENDING, R_QUEUE_NOT_FOUND
        nom = self._preempting.nominations.get(group)
        if nom is not None:
            preempting = nom.reason()
            return (preempting,), PENDING, preempting.kind
        # What is true now (pods missing) before what last happened (why a plan was refused).
        missing = incomplete(gang) if gang is not None else None
        if missing is not None:
            if why is not None and why.kind == R_PARTIAL_EVICTED:
                return (why, missing), PENDING, R_PARTIAL_EVICTED
            return (missing,), PENDING, R_GANG_INCOMPLETE
        if why is not None:
            return (why,), PENDING, why.kind
        return (NotPlanned(),), PENDING, R_WAITING

    def _view_without_pods(self, group: str) -> GroupView:
        """A PodGroup object no pod has joined yet, as a view with no pods."""
        spec = self._state.podgroups.get(group)
        if spec is None:
            errors = self._state.invalid_podgroups.get(group) or (
                FieldError(f"PodGroup {group}", "metadata.name", "not found"),
            )
            return GroupView(group, None, None, errors, source=f"PodGroup {group}")
        built = build_gang(spec, [], self._state.topologies)
        return GroupView(group, spec, built, built.errors, source=f"PodGroup {group}")

    def _subgroups(self, view: GroupView, gp: GroupPlan | None) -> Iterable[SubGroupStatus]:
        gang = view.built.gang if view.built else None
        if gang is None:
            return
        reserved = gp.reserved if gp else {}
        held = gp.expected if gp else {}
        domains = self._plans.domains(view.key)
        for scope in gang.scopes:
            if not scope.name:
                continue
            keys = [m.key for m in scope.all_members()]
            bound = sum(1 for k in keys if (p := self._state.pods.get(k)) is not None and p.node_name)
            yield SubGroupStatus(
                scope.name,
                scope.min_member,
                sum(1 for k in keys if k not in view.expected),  # pods that exist
                bound + sum(1 for k in keys if k in reserved or k in held),
                bound,
                domains.get(scope.key),
            )
