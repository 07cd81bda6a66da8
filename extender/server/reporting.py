"""What the extender tells people: Events on pods and PodGroups, one log line per decision, and
the PodGroup writer's nudge when a gang's status may have changed."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from extender.core.decisions import PlanEvent
from extender.core.lookup import Lookup
from extender.model.keys import GroupKey
from extender.model.pod import PodInfo
from extender.server.actions import Actions
from extender.server.tasks import Tasks

log = structlog.get_logger("topogang")
PODGROUP_API = "scheduling.topogang.io/v1alpha1"


def _ignore(group: str) -> None:
    pass


def unbound_members(lookup: Lookup, group: str) -> list[PodInfo]:
    pods = (lookup.pod(k) for k in lookup.members(group))
    return [p for p in pods if p is not None and p.node_name is None]


class Reporter:
    def __init__(self, lookup: Lookup, actions: Actions, tasks: Tasks) -> None:
        self._lookup = lookup
        self.actions = actions
        self._tasks = tasks
        # Told the group whenever a decision may have changed its status (the PodGroup writer).
        self.changed: Callable[[str], None] = _ignore
        self._pending_logged: dict[str, str] = {}  # group -> the pending reason last logged

    def emit(self, pod: PodInfo, reason: str, message: str, kind: str, *, with_controller: bool = False) -> None:
        """An Event on POD; WITH_CONTROLLER: its controller named as the related object (what a
        new leader reads back a move's replacement by: kube/moved.py)."""
        involved = {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
        ref = pod.controller if with_controller else None
        related = None
        if ref is not None:
            related = {"apiVersion": ref.api_version, "kind": ref.kind, "namespace": pod.namespace, "name": ref.name}
            related["uid"] = ref.uid
        self._tasks.spawn(self.actions.event(involved, reason, message, kind, related), "event")

    def emit_group(self, group: str, reason: str, message: str, kind: str) -> None:
        """An Event about GROUP's PodGroup (topogang writes one for every gang of a workload)."""
        key = GroupKey.parse(group)
        involved = {"apiVersion": PODGROUP_API, "kind": "PodGroup", "namespace": key.namespace, "name": key.name}
        self._tasks.spawn(self.actions.event(involved, reason, message, kind), "event")

    def emit_unbound(self, group: str, reason: str, message: str) -> None:
        """An Event on each of GROUP's members not bound yet."""
        for member in unbound_members(self._lookup, group):
            self.emit(member, reason, message, "Normal")

    def marks_unschedulable(self, group: str | None) -> bool:
        """PodGroup spec.markUnschedulable: false (KAI's hierarchical PodGroup design) asks for no
        unschedulable Events on its pods; kube-scheduler's own FailedScheduling Events are not
        topogang's to withhold. A pod in no gang yet gets none: the PodGroup it names may not have
        reached our watch, and may say false (kube-scheduler's Event carries the reason)."""
        if group is None:
            return False
        spec = self._lookup.podgroup(group)  # a PodGroup object's, without building the gang
        if spec is not None:
            return spec.mark_unschedulable is not False
        if not self._lookup.has_pods(group):
            return True
        spec = self._lookup.view(group).spec
        return spec is None or spec.mark_unschedulable is not False

    def decision(self, event: PlanEvent, seconds: float, warnings: bool = True) -> None:
        """One log line for EVENT; WARNINGS: with the gang's warnings (which read its built view)."""
        fields = event.fields()
        fields["plan_ms"] = round(seconds * 1000, 2)
        if warnings and self._lookup.has_pods(event.group) and (found := self._lookup.view(event.group).warnings):
            # e.g. a device selector topogang cannot evaluate: that request is left to kube-scheduler
            fields["warnings"] = list(found)
        if event.outcome in ("preempting", "defragmenting", "repairing"):
            self._pending_logged.pop(event.group, None)
            log.info(f"gang {event.outcome}", **fields)
        elif event.outcome != "pending":
            self._pending_logged.pop(event.group, None)
            log.info("gang placed", **fields)
        elif self._pending_logged.get(event.group) != event.reason:
            # Every member refused re-checks its gang; the line is written when the reason changes.
            self._pending_logged[event.group] = event.reason
            log.info("gang pending", **fields)
        else:
            log.debug("gang pending", **fields)

    def sweep(self, groups: set[str]) -> None:
        """Forget the gangs not in GROUPS (gone)."""
        for group in [g for g in self._pending_logged if g not in groups]:
            del self._pending_logged[group]

    def clear(self) -> None:
        self._pending_logged.clear()
