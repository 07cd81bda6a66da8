"""A pod's requests as kube-scheduler counts them (k8s.io/component-helpers `resource.PodRequests`).

Three layers, in kube-scheduler's order:
1. *Containers*: the sum of the containers and the sidecars (restartable init containers), or the
   peak of an ordinary init container plus the sidecars started before it, whichever is larger.
   For a pod on a node (in-place resize, `InPlacePodVerticalScaling`, GA in 1.35) each container
   counts the larger of its spec and what the kubelet allocated (`allocatedResources`) or
   actuated (`resources.requests`) in its status; the pod-level status (`status.allocatedResources`
   and `status.resources.requests`, `InPlacePodLevelResourcesVerticalScaling`, on in 1.37) stands
   for the containers' when both are written. When the pod's `PodResizePending` condition says
   `Infeasible`, the spec it cannot have does not count: only the status does.
2. *Pod-level requests* (`spec.resources`, `PodLevelResources`, on since 1.34) replace the
   containers' for cpu, memory and hugepages-* only; every other resource (GPUs, extended
   resources) still comes from the containers. On a node, the pod-level status counts as in 1.
3. The pod *overhead* is added.

The API server defaults a missing pod-level request on create (from the containers' cpu and
memory, then from the pod-level limit); files read offline are defaulted the same way, so a pod
that writes only `spec.resources.limits.cpu: 16` asks for 16 cpus here as in a cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from extender.model.errors import ErrorList
from extender.model.quantity import QuantityError, parse_nonnegative
from extender.model.raw import JSON, mapping, seq

# What pod-level requests may set (IsSupportedPodLevelResource); the API server rejects others.
POD_LEVEL = frozenset({"cpu", "memory"})
HUGEPAGES = "hugepages-"
OVERCOMMITTABLE = frozenset({"cpu", "memory"})  # defaulted at pod level from the containers' requests
RESIZE_PENDING, INFEASIBLE = "PodResizePending", "Infeasible"
POD_SLOT = "pods"  # every pod takes one of its node's allocatable pods

Requests = dict[str, int]


def pod_level(name: str) -> bool:
    return name in POD_LEVEL or name.startswith(HUGEPAGES)


def resource_list(raw: object, field: str, errors: ErrorList) -> Requests:
    out: Requests = {}
    for name, value in mapping(raw, field, errors).items():
        try:
            out[str(name)] = parse_nonnegative(value)
        except QuantityError as exc:
            errors.add(f"{field}.{name}", str(exc))
    return out


def _add(into: Requests, other: Mapping[str, int]) -> None:
    for name, value in other.items():
        into[name] = into.get(name, 0) + value


def _max(into: Requests, *others: Mapping[str, int] | None) -> Requests:
    for other in others:
        for name, value in (other or {}).items():
            if value > into.get(name, -1):
                into[name] = value
    return into


def _container_requests(body: JSON, field: str, errors: ErrorList) -> Requests:
    resources = mapping(body.get("resources"), f"{field}.resources", errors)
    requests = resource_list(resources.get("requests"), f"{field}.resources.requests", errors)
    # The API server defaults a missing request to its limit; do the same for files read offline.
    for name, value in resource_list(resources.get("limits"), f"{field}.resources.limits", errors).items():
        requests.setdefault(name, value)
    return requests


# A container's status as far as requests go: (allocatedResources, resources.requests), each
# None when not written.
Status = tuple[Requests | None, Requests | None]
# (the container's spec requests, its status or None, whether a resize is infeasible) -> what
# it counts (None: nothing).
PerContainer = Callable[[Requests, Status | None, bool], Requests | None]
Container = tuple[str, Requests, bool]  # name, spec requests (limits defaulted), restartable (a sidecar)


def _containers(spec: JSON, key: str, errors: ErrorList) -> list[Container]:
    raw_list = spec.get(key)
    if raw_list is None:
        return []
    out = []
    for i, raw in enumerate(seq(raw_list, f"spec.{key}", errors)):
        field = f"spec.{key}[{i}]"
        body = mapping(raw, field, errors)
        sidecar = key == "initContainers" and body.get("restartPolicy") == "Always"
        out.append((str(body.get("name", "")), _container_requests(body, field, errors), sidecar))
    return out


def _aggregate(
    containers: list[Container],
    inits: list[Container],
    of: PerContainer | None = None,
    statuses: Mapping[str, Status] | None = None,
    infeasible: bool = False,
) -> Requests:
    """max(containers + sidecars, the peak of each init container plus the sidecars before it),
    each container counted by OF (default: its spec)."""

    def count(name: str, spec: Requests) -> Requests:
        if of is None:
            return spec
        return of(spec, (statuses or {}).get(name), infeasible) or {}

    total: Requests = {}
    for name, spec, _ in containers:
        _add(total, count(name, spec))
    sidecars: Requests = {}
    peak: Requests = {}
    for name, spec, sidecar in inits:
        req = count(name, spec)
        if sidecar:
            _add(total, req)
            _add(sidecars, req)
            _max(peak, sidecars)
        else:
            running = dict(sidecars)
            _add(running, req)
            _max(peak, running)
    return _max(total, peak)


def _listed(status: JSON, key: str, errors: ErrorList) -> Sequence[Any]:
    """status.KEY as a list, without a copy (read for every event of every bound pod)."""
    value = status.get(key)
    if value is None or isinstance(value, list):
        return value or ()
    return seq(value, f"status.{key}", errors)


def _statuses(status: JSON, errors: ErrorList) -> dict[str, Status]:
    """Container name -> its status, for the containers whose status carries requests (parsed for
    every event of every bound pod: most carry none, and cost a key lookup each)."""
    found: dict[str, Status] = {}
    for key in ("initContainerStatuses", "containerStatuses"):  # names are unique across both
        for i, body in enumerate(_listed(status, key, errors)):
            if not isinstance(body, dict | Mapping):
                mapping(body, f"status.{key}[{i}]", errors)  # the error
            elif "allocatedResources" in body or "resources" in body:
                written = _written(body, f"status.{key}[{i}]", errors)
                if written != (None, None):
                    found[str(body.get("name", ""))] = written
    return found


def _written(body: JSON, field: str, errors: ErrorList) -> Status:
    """(allocatedResources, resources.requests) of a pod's or a container's status."""
    allocated, resources = body.get("allocatedResources"), body.get("resources")
    actuated = None if resources is None else mapping(resources, f"{field}.resources", errors).get("requests")
    return (
        None if allocated is None else resource_list(allocated, f"{field}.allocatedResources", errors),
        None if actuated is None else resource_list(actuated, f"{field}.resources.requests", errors),
    )


def _allocated(spec: Requests, status: Status | None, infeasible: bool) -> Requests | None:
    if status is not None and status[0] is not None:
        return status[0]
    return None if infeasible else spec


def _actuated(spec: Requests, status: Status | None, infeasible: bool) -> Requests | None:
    if status is not None and status[1] is not None:
        return status[1]
    return _allocated(spec, status, infeasible)


def _resize_infeasible(status: JSON, errors: ErrorList) -> bool:
    for condition in _listed(status, "conditions", errors):
        if isinstance(condition, dict | Mapping) and condition.get("type") == RESIZE_PENDING:
            return condition.get("reason") == INFEASIBLE  # the first such condition decides
    return False


def _pod_level_requests(spec: JSON, containers: Requests, errors: ErrorList) -> Requests | None:
    """spec.resources.requests as the API server leaves them after defaulting, of the names
    pod-level requests may set; None when the pod sets none."""
    raw = spec.get("resources")
    if raw is None:
        return None
    resources = mapping(raw, "spec.resources", errors)
    requests = resource_list(resources.get("requests"), "spec.resources.requests", errors)
    limits = resource_list(resources.get("limits"), "spec.resources.limits", errors)
    if not requests and not limits:
        return None
    for name, value in containers.items():  # PodLevelResourcesFixDefaulting: the containers' first...
        if name in OVERCOMMITTABLE:
            requests.setdefault(name, value)
    for name, value in limits.items():  # ... then the pod-level limit
        if pod_level(name):
            requests.setdefault(name, value)
    chosen = {name: value for name, value in requests.items() if pod_level(name)}
    return chosen or None


def _resized(
    containers: list[Container],
    inits: list[Container],
    specs: Requests,
    status: JSON,
    infeasible: bool,
    pod_status: Status,
    errors: ErrorList,
) -> Requests:
    """The containers' requests of a pod on a node: the larger of spec, allocated and actuated
    (only the last two when the resize is infeasible)."""
    allocated, actuated = pod_status
    if allocated is None or actuated is None:  # no pod-level status: the containers' own
        statuses = _statuses(status, errors)
        if not statuses and not infeasible:
            return specs  # nothing resized: every container counts its spec
        allocated = _aggregate(containers, inits, _allocated, statuses, infeasible)
        actuated = _aggregate(containers, inits, _actuated, statuses, infeasible)
    return _max({}, actuated, allocated) if infeasible else _max(dict(specs), actuated, allocated)


def effective_requests(spec: JSON, errors: ErrorList, status: JSON | None = None) -> Requests:
    """What the pod takes from its node, the way kube-scheduler's NodeResourcesFit counts it
    (see the module docstring), in milli-units, zero requests left out, plus one pod slot.
    STATUS: the pod's status when it is bound to a node (a pod being scheduled is counted by its
    spec alone)."""
    containers, inits = _containers(spec, "containers", errors), _containers(spec, "initContainers", errors)
    specs = _aggregate(containers, inits)
    total, infeasible = specs, False
    pod_status: Status = (None, None)
    if status:
        infeasible = _resize_infeasible(status, errors)
        pod_status = _written(status, "status", errors)
        total = _resized(containers, inits, specs, status, infeasible, pod_status, errors)
    if spec.get("resources") is not None and (plr := _pod_level_requests(spec, specs, errors)) is not None:
        if status and status.get("resources") is not None:  # resized at pod level
            plr = _max({} if infeasible else dict(plr), pod_status[1], pod_status[0])
        total = dict(total)  # (it may be `specs`, which defaulting read)
        total.update((name, value) for name, value in plr.items() if pod_level(name))
    if spec.get("overhead") is not None:
        total = dict(total)
        _add(total, resource_list(spec["overhead"], "spec.overhead", errors))
    out = {name: value for name, value in total.items() if value > 0}
    out[POD_SLOT] = 1000
    return out
