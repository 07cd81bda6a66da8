"""What topogang writes to a PodGroup: pure functions from the core's GroupStatus to API bodies.

    status_body(status, previous, now, generation)   the `status` of a PodGroup
    transition(previous, status)                       the Event a change deserves, or None
    derived_object(view, namespace, name)              the PodGroup object of a workload's gang

Status (scheduling.topogang.io/v1alpha1, field names as in manifests/base/crds/podgroups.yaml):

    phase, message, observedGeneration, pods, planned, bound,
    domains      {"PodGroup": "zone z1", "<SubGroup>": "rack z1/b1/r3", ...} once placed
    subGroups    [{name, minMember, pods, planned, bound, domain}]
    lastRepair   {message, time}: the last repair (a broken part moved whole), kept across leaders
    lastEviction {message, time}: what evicted its pods last (preempted for another gang, moved to
                 make a domain whole for one, given up by recovery or as unrepairable), kept
                 across leaders, for `explain`
    reservation  {domain, nodes, since, estimatedStart}: room held for the gang while it waits
                 (core/reservations.py); absent otherwise
    estimatedStart, queuePosition  while it waits for room, among the first gangs of the queue:
                 when it is expected to start and its place (core/estimates.py); absent otherwise
    overdueSince when it had waited longer than its maximum wait; absent unless overdue
    phase        Pending, Scheduled, Invalid, or Finished once every pod has succeeded or failed
    conditions   Scheduled      True once the minimum is bound (and once finished); else False with why
                 Unschedulable  True while the gang cannot run (GangIncomplete, NoCapacity,
                                NoDomain, SearchLimit, Invalid, BindTimeout, PlanExpired,
                                MemberGone); else False (Planned, Waiting, Scheduled)
                 UnschedulableOnNodePool  spec.schedulingBackoff 1: True once a planning
                                attempt failed, with its reason; absent otherwise (-1, unset)
                 GangSplit      True (reason SplitBetweenDeciders) once a member was bound where
                                topogang did not plan it: a second decider placed part of the gang

Reasons come from the core as data (`GroupStatus.reason`), never from parsing messages.
`lastTransitionTime` is carried over from PREVIOUS unless the condition's status flips, so a
status that did not change yields a body equal to PREVIOUS, and nothing is written. A gang that
is Scheduled keeps the domains PREVIOUS recorded when the core no longer knows them (a new
leader has no plans; the bound pods have not moved).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.core.decisions import FINISHED, R_GANG_INCOMPLETE, R_SCHEDULED, SCHEDULED
from extender.core.held_room import ReservedRoom, rfc3339
from extender.core.membership import GroupView
from extender.core.standing import GroupStatus
from extender.model.podgroup_body import podgroup_spec_body

API_VERSION = "scheduling.topogang.io/v1alpha1"
KIND = "PodGroup"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "topogang"
SCHEDULED_CONDITION = "Scheduled"
UNSCHEDULABLE_CONDITION = "Unschedulable"
NODE_POOL_CONDITION = "UnschedulableOnNodePool"  # KAI's, for spec.schedulingBackoff: 1
SPLIT_CONDITION, SPLIT_REASON = "GangSplit", "SplitBetweenDeciders"
MESSAGE_LIMIT = 4096  # characters of a message kept in status and conditions

JSON = dict[str, Any]


def _message(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def _condition(
    kind: str, true: bool, reason: str, message: str, previous: Mapping[str, Any] | None, now: str, generation: int
) -> JSON:
    status = "True" if true else "False"
    carried = previous is not None and previous.get("status") == status and previous.get("lastTransitionTime")
    out: JSON = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": previous["lastTransitionTime"] if carried and previous is not None else now,
    }
    if generation:
        out["observedGeneration"] = generation
    return out


def conditions_of(previous: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    raw = (previous or {}).get("conditions")
    if not isinstance(raw, list):
        return {}
    return {str(c.get("type")): c for c in raw if isinstance(c, Mapping)}


def status_body(status: GroupStatus, previous: Mapping[str, Any] | None, now: str, generation: int = 0) -> JSON:
    """The PodGroup `status` for STATUS; NOW is an RFC 3339 time for conditions that change."""
    before = conditions_of(previous)
    message = _message(status.message)
    # The PodGroup's own domain under "PodGroup"; SubGroups (and sets) under their names.
    domains = {"PodGroup" if scope == status.key else scope: str(d) for scope, d in status.domains.items()}
    subgroup_domains = {sg.name: str(sg.domain) for sg in status.subgroups if sg.domain is not None}
    if status.phase == SCHEDULED and not domains and previous:
        domains = dict(previous.get("domains") or {})  # placed by a plan this replica never saw
        subgroup_domains = {
            str(sg.get("name")): str(sg["domain"])
            for sg in previous.get("subGroups") or ()
            if isinstance(sg, Mapping) and sg.get("domain")
        }
    subgroups = []
    for sg in status.subgroups:
        item: JSON = {
            "name": sg.name,
            "minMember": sg.min_member,
            "pods": sg.pods,
            "planned": sg.planned,
            "bound": sg.bound,
        }
        if subgroup_domains.get(sg.name):
            item["domain"] = subgroup_domains[sg.name]
        subgroups.append(item)
    body: JSON = {
        "phase": status.phase,
        "message": message,
        "pods": status.pods,
        "planned": status.planned,
        "bound": status.bound,
        "conditions": _conditions(status, before, message, now, generation),
    }
    for field, text in (("lastRepair", status.last_repair), ("lastEviction", status.last_eviction)):
        kept = _kept(field, text, previous, now)
        if kept is not None:
            body[field] = kept
    if status.reservation is not None:
        body["reservation"] = _reservation(status.reservation)
    if status.expected is not None:
        body["queuePosition"] = status.expected.position
        if status.expected.start is not None:
            body["estimatedStart"] = rfc3339(status.expected.start)
    if status.overdue is not None and status.overdue.since is not None:
        body["overdueSince"] = rfc3339(status.overdue.since)
    if generation:
        body["observedGeneration"] = generation
    if domains:
        body["domains"] = domains
    if subgroups:
        body["subGroups"] = subgroups
    return body


def _conditions(
    status: GroupStatus, before: Mapping[str, Mapping[str, Any]], message: str, now: str, generation: int
) -> list[JSON]:
    scheduled = status.phase in (SCHEDULED, FINISHED)
    out = [
        _condition(
            SCHEDULED_CONDITION,
            scheduled,
            R_SCHEDULED if status.phase == SCHEDULED else status.reason,
            message,
            before.get(SCHEDULED_CONDITION),
            now,
            generation,
        ),
        _condition(
            UNSCHEDULABLE_CONDITION,
            status.unschedulable,
            status.reason,
            message,
            before.get(UNSCHEDULABLE_CONDITION),
            now,
            generation,
        ),
    ]
    if status.node_pool_unschedulable or NODE_POOL_CONDITION in before:
        out.append(
            _condition(
                NODE_POOL_CONDITION,
                status.node_pool_unschedulable,
                status.reason,
                message,
                before.get(NODE_POOL_CONDITION),
                now,
                generation,
            )
        )
    if status.split is not None:
        said = _message(status.split.render())
        out.append(_condition(SPLIT_CONDITION, True, SPLIT_REASON, said, before.get(SPLIT_CONDITION), now, generation))
    return out


def _kept(field: str, text: str, previous: Mapping[str, Any] | None, now: str) -> Any:
    """lastRepair or lastEviction ({message, time}): TEXT, at the time it was first written; with
    no TEXT (this replica has not seen one), the last one written."""
    if text:
        before = (previous or {}).get(field) or {}
        same = isinstance(before, Mapping) and before.get("message") == _message(text)
        when = before.get("time") if same else now
        return {"message": _message(text), "time": when or now}
    if previous and isinstance(previous.get(field), Mapping):
        return previous[field]
    return None


def _reservation(room: ReservedRoom) -> JSON:
    out: JSON = {"domain": str(room.domain), "nodes": room.nodes}
    if room.made is not None and room.start is not None:  # (the server always has a wall clock)
        out |= {"since": rfc3339(room.made), "estimatedStart": rfc3339(room.start)}
    return out


def _standing(body: Mapping[str, Any] | None) -> tuple[str, str]:
    """(phase, reason) of a written status: what an Event is about."""
    if not body:
        return ("", "")
    unschedulable = conditions_of(body).get(UNSCHEDULABLE_CONDITION) or {}
    return (str(body.get("phase") or ""), str(unschedulable.get("reason") or ""))


def transition(previous: Mapping[str, Any] | None, status: GroupStatus) -> tuple[str, str, str] | None:
    """(type, reason, message) of the Event on the PodGroup when its phase (or why it cannot run)
    changed since PREVIOUS: Normal Scheduled, or Warning Unschedulable; Warning GangSplit when a
    second decider placed part of it; None for other changes (counts, a plan made and waiting for
    its binds)."""
    split = conditions_of(previous).get(SPLIT_CONDITION) or {}
    if status.split is not None and split.get("status") != "True":
        return ("Warning", SPLIT_CONDITION, _message(status.split.render()))
    if _standing(previous) == (status.phase, status.reason):
        return None
    if status.phase == SCHEDULED:
        return ("Normal", "Scheduled", _message(status.message))
    if status.phase == FINISHED:
        return ("Normal", "Finished", _message(status.message))
    if status.unschedulable and status.reason != R_GANG_INCOMPLETE:
        # An incomplete gang is warned about by the writer, once, after a grace period.
        return ("Warning", "Unschedulable", _message(status.message))
    return None


def derived_object(view: GroupView, namespace: str, name: str) -> JSON | None:
    """The PodGroup object for a gang topogang derived from a workload, owned by the workload (so
    it is garbage-collected with it), or None when the gang has no workload to belong to. A gang
    that is Invalid gets an object without spec, so its status can still say why."""
    owner = view.owner
    if owner is None or not owner.uid:
        return None
    meta: JSON = {
        "name": name,
        "namespace": namespace,
        "labels": {MANAGED_BY_LABEL: MANAGED_BY},
        "ownerReferences": [
            {
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
                "controller": True,
                "blockOwnerDeletion": False,
            }
        ],
    }
    body: JSON = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}
    if view.spec is not None:
        if view.spec.annotations:
            meta["annotations"] = dict(view.spec.annotations)
        body["spec"] = podgroup_spec_body(view.spec)
    return body
