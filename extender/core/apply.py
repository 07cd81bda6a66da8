"""How each kind of API object lands in the cluster view.

Shared by the simulator (objects read from YAML) and the live cache (objects from list+watch),
so both see a cluster the same way:

    Node                      ClusterState.upsert_node / delete_node
    Pod                       GangScheduler.observe_pod / delete_pod (reservations follow the pod)
    PodGroup (topogang, KAI)  ClusterState.set_podgroup; one that does not parse is stored as
                              invalid, so its gang shows `Invalid` with the field errors
    Topology (topogang, KAI, Kueue)  ClusterState.set_topology, by name
    PriorityClass             ClusterState.set_priority_class
    PodDisruptionBudget       ClusterState.set_budget (read by preemption only)
    ResourceInterface         ClusterState.set_resource_interface, by name
    ResourceFlavor (Kueue)    ClusterState.set_flavor, by name
    Queue (KAI), LocalQueue (Kueue)  ClusterState.set_queue; their CRDs, set_queue_api
    ResourceSlice, DeviceClass, ResourceClaim, ResourceClaimTemplate (resource.k8s.io/v1)
                              ClusterState.set_dra (core/dra/objects.py)
    anything else             ClusterState.set_object: the workload owners the grouper reads

Any other object that does not parse raises `InvalidObject` and the view keeps what it had of
it (nothing, for a new object): the caller reports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.core.cluster import object_key
from extender.core.dra.objects import apply_dra, delete_dra
from extender.core.queues import KUEUE_LOCAL_QUEUE, QUEUE_CRDS, QUEUE_KINDS, QueueKey
from extender.core.scheduler import GangScheduler
from extender.model.budget import parse_budget
from extender.model.errors import FieldError, InvalidObject
from extender.model.flavor import RESOURCE_FLAVOR_API_VERSIONS, parse_resource_flavor
from extender.model.node import parse_node
from extender.model.pod import parse_pod
from extender.model.podgroup import PODGROUP_API_VERSIONS, parse_podgroup
from extender.model.raw import literal, object_name
from extender.model.topology import TOPOLOGY_API_VERSIONS, parse_topology

JSON = Mapping[str, Any]
DEFAULT_NAMESPACE = "default"


def apply_object(scheduler: GangScheduler, body: JSON) -> tuple[FieldError, ...]:
    """`body` was added or changed. Returns the errors of an object stored as invalid (a
    PodGroup), else (); raises InvalidObject for any other object that cannot be used."""
    state = scheduler.state
    api, kind = _type_of(body)
    if kind == "Node":
        state.upsert_node(parse_node(body))
    elif kind == "Pod":
        scheduler.observe_pod(parse_pod(body))
    elif kind == "PodGroup" and api in PODGROUP_API_VERSIONS:
        key = _namespaced_key(body)
        _last_repair(scheduler, key, body)
        _last_eviction(scheduler, key, body)
        _reservation(scheduler, key, body)
        try:
            state.set_podgroup(key, parse_podgroup(body))
        except InvalidObject as exc:
            state.set_podgroup(key, None, exc.errors)
            return exc.errors
    elif kind == "Topology" and api in TOPOLOGY_API_VERSIONS:
        topology = parse_topology(body)
        state.set_topology(topology.name, topology)
    elif kind == "PriorityClass":
        state.set_priority_class(_name(body), *parse_priority_class(body))
    elif kind == "PodDisruptionBudget":
        state.set_budget(_namespaced_key(body), parse_budget(body))
    elif kind == "ResourceInterface":
        state.set_resource_interface(object_name(body), body)
    elif kind == "ResourceFlavor" and api in RESOURCE_FLAVOR_API_VERSIONS:
        flavor = parse_resource_flavor(body)
        state.set_flavor(flavor.name, flavor)
    elif (queue := _queue_key(api, kind, body)) is not None:
        state.set_queue(queue, True)
    elif kind == "CustomResourceDefinition" and _name(body) in QUEUE_CRDS:
        state.set_queue_api(QUEUE_CRDS[_name(body)], True)
    elif not apply_dra(state, api, kind, body):
        state.set_object(_owner_key(api, kind, body), body)
    return ()


def _last_repair(scheduler: GangScheduler, key: str, body: JSON) -> None:
    """The PodGroup status's lastRepair, for `explain` (written by topogang; read leniently)."""
    text = _status_note(body, "lastRepair")
    if text is not None:
        scheduler.repairs.note(key, text)


def _last_eviction(scheduler: GangScheduler, key: str, body: JSON) -> None:
    """The PodGroup status's lastEviction (written by the leader), for `explain`; read leniently."""
    scheduler.evicted.note(key, _status_note(body, "lastEviction"))


def _status_note(body: JSON, field: str) -> str | None:
    """`status.<field>` as topogang writes it ({message, time}) in a line, or None."""
    status = body.get("status")
    last = status.get(field) if isinstance(status, Mapping) else None
    if not isinstance(last, Mapping) or not isinstance(last.get("message"), str):
        return None
    when = last.get("time")
    return f"{last['message']} (at {when})" if isinstance(when, str) else str(last["message"])


def _reservation(scheduler: GangScheduler, key: str, body: JSON) -> None:
    """The PodGroup status's reservation (written by the leader), for `explain`; read leniently."""
    status = body.get("status")
    held = status.get("reservation") if isinstance(status, Mapping) else None
    text = None
    if isinstance(held, Mapping) and all(isinstance(held.get(k), str) for k in ("domain", "estimatedStart")):
        text = f"room held for it in {held['domain']}; expected to start by {held['estimatedStart']}"
    scheduler.reserving.note(key, text, _waited(status) if isinstance(status, Mapping) else ("", ""))


def _waited(status: Mapping[str, Any]) -> tuple[str, str]:
    """(overdue, queue) as the status's overdueSince, queuePosition and estimatedStart say them."""
    since, place, start = status.get("overdueSince"), status.get("queuePosition"), status.get("estimatedStart")
    late = f"overdue since {since}: waited past its maximum wait" if isinstance(since, str) else ""
    queue = ""
    if isinstance(place, int) and not isinstance(place, bool):
        queue = f"position {place} in the queue" + (f"; expected to start by {start}" if isinstance(start, str) else "")
    return late, queue


def delete_object(scheduler: GangScheduler, body: JSON) -> None:
    """`body` went away; only its apiVersion, kind and metadata are read."""
    state = scheduler.state
    api, kind = _type_of(body)
    if kind == "Node":
        state.delete_node(_name(body))
    elif kind == "Pod":
        scheduler.delete_pod(_namespaced_key(body))
    elif kind == "PodGroup" and api in PODGROUP_API_VERSIONS:
        state.set_podgroup(_namespaced_key(body), None)
        scheduler.evicted.note(_namespaced_key(body), None)
    elif kind == "Topology" and api in TOPOLOGY_API_VERSIONS:
        state.set_topology(_name(body), None)
    elif kind == "PriorityClass":
        state.set_priority_class(_name(body), None)
    elif kind == "PodDisruptionBudget":
        state.set_budget(_namespaced_key(body), None)
    elif kind == "ResourceInterface":
        state.set_resource_interface(object_name(body), None)
    elif kind == "ResourceFlavor" and api in RESOURCE_FLAVOR_API_VERSIONS:
        state.set_flavor(_name(body), None)
    elif (queue := _queue_key(api, kind, body)) is not None:
        state.set_queue(queue, False)
    elif not delete_dra(state, api, kind, body):
        state.set_object(_owner_key(api, kind, body), None)


def parse_priority_class(body: JSON) -> tuple[int, bool]:
    """A PriorityClass's value and whether it is the globalDefault."""
    value, default = body.get("value"), body.get("globalDefault", False)
    errors, where = [], f"PriorityClass {_name(body)}"
    if not isinstance(value, int) or isinstance(value, bool):
        errors.append(FieldError(where, "value", f"expected an integer, got {literal(value)}"))
    if not isinstance(default, bool):
        errors.append(FieldError(where, "globalDefault", f"expected true or false, got {literal(default)}"))
    if errors:
        raise InvalidObject(errors)
    assert isinstance(value, int)
    return value, default


def _queue_key(api: str, kind: str, body: JSON) -> QueueKey | None:
    """KAI's Queue (cluster-scoped) or Kueue's LocalQueue, as the queue index keys it."""
    found = f"{api.rpartition('/')[0]}/{kind}"
    if found not in QUEUE_KINDS:
        return None
    return (found, _namespace(body) if found == KUEUE_LOCAL_QUEUE else "", _name(body))


def _type_of(body: JSON) -> tuple[str, str]:
    return str(body.get("apiVersion") or ""), str(body.get("kind") or "")


def _meta(body: JSON) -> JSON:
    meta = body.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _name(body: JSON) -> str:
    return str(_meta(body).get("name") or "")


def _namespace(body: JSON) -> str:
    return str(_meta(body).get("namespace") or DEFAULT_NAMESPACE)


def _namespaced_key(body: JSON) -> str:
    return f"{_namespace(body)}/{_name(body)}"


def _owner_key(api: str, kind: str, body: JSON) -> tuple[str, str, str, str]:
    return object_key(api, kind, _namespace(body), _name(body))
