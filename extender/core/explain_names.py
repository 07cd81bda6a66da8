"""What `topogang explain NAME` means by NAME: a gang, a workload, a pod, or one evicted since.

People start from what they see pending: a pod. So NAME is, in this order, a gang (its PodGroup,
`ns/name`), the workload a gang was derived from (`ns/train` for the TFJob `train`), a pod
(explained through its gang, saying which pod was asked), or a gang or pod topogang evicted
(remembered in `GangScheduler.evicted`, bounded). A NAME without a namespace is not guessed at:
the answer says what to write, with the names that would match.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from extender.core.scheduler import GangScheduler
from extender.model.keys import GroupKey

SUGGESTED = 8  # names listed for a NAME without a namespace


@dataclass(frozen=True)
class Named:
    """What NAME resolved to: the gangs to explain (live or evicted), the pod asked about, or why none."""

    groups: tuple[str, ...] = ()
    pod: str = ""  # NAME was this pod's (namespace/name)
    problem: str = ""  # nothing to explain: what to write instead, or why


def find_groups(scheduler: GangScheduler, name: str) -> list[str]:
    """Gangs named NAME ("ns/name"): the PodGroup itself, or the gangs of the workload NAME, live
    or evicted."""
    groups = scheduler.lookup.groups()
    evicted = [g for g in scheduler.evicted.workloads() if (e := scheduler.evicted.of(g)) is not None and e.gang]
    evicted += scheduler.evicted.noted_groups()  # (a live cluster: the PodGroup statuses say so)
    if name in groups or name in evicted:
        return [name]
    wanted = GroupKey.parse(name)
    out = set()
    for g in groups:
        key = GroupKey.parse(g)
        if key.namespace != wanted.namespace:
            continue
        view = scheduler.lookup.view(g)
        owner = view.owner  # the workload a derived gang comes from
        if (
            (owner is not None and owner.name == wanted.name)
            or key.name.endswith(f"-{wanted.name}")
            or _owned_by(scheduler, view.pods, wanted.name)
        ):
            out.add(g)
    for g in evicted:  # its pods are gone: only its name can tell its workload
        key = GroupKey.parse(g)
        if key.namespace == wanted.namespace and key.name.endswith(f"-{wanted.name}"):
            out.add(g)
    return sorted(out)


def _owned_by(scheduler: GangScheduler, pods: Iterable[str], name: str) -> bool:
    """Whether a pod's controller is NAME (a scheduling.k8s.io PodGroup its Job's controller made)."""
    first = next(iter(pods), None)
    pod = scheduler.state.pods.get(first) if first is not None else None
    controller = pod.controller if pod is not None else None
    return controller is not None and controller.name == name


def resolve(scheduler: GangScheduler, name: str) -> Named:
    """NAME as `explain` reads it (see the module docstring)."""
    if "/" not in name:
        return Named(problem=_qualify(scheduler, name))
    groups = find_groups(scheduler, name)
    if groups:
        return Named(tuple(groups))
    if name in scheduler.state.pods:
        group = scheduler.lookup.group_of(name)
        if group is not None:
            return Named((group,), pod=name)
        waiting = scheduler.lookup.waiting(name)
        if waiting is not None:
            return Named(problem=f"pod {name} is in no gang yet: {waiting}")
        return Named(problem=f"pod {name} belongs to no gang: kube-scheduler places it on its own")
    evicted = scheduler.evicted.of(name) or scheduler.evicted.of_pod(name)
    if evicted is not None:
        return Named((evicted.workload,), pod="" if evicted.workload == name else name)
    return Named(problem=f"no gang named {name} (a PodGroup, a workload or a pod, as namespace/name)")


def _qualify(scheduler: GangScheduler, name: str) -> str:
    """The answer to a NAME without a namespace: what to write, and the names that match."""
    found: set[str] = set()
    for g in [*scheduler.lookup.groups(), *scheduler.evicted.workloads()]:
        key = GroupKey.parse(g)
        if key.name == name or key.name.endswith(f"-{name}"):
            found.add(f"{key.namespace}/{name}")
    for pod in [*scheduler.state.pods, *scheduler.evicted.pods()]:
        if GroupKey.parse(pod).name == name:
            found.add(pod)
    matches = sorted(found)
    if not matches:
        return f"write NAMESPACE/NAME: nothing is named {name} in any namespace (no gang, workload or pod)"
    more = f" and {len(matches) - SUGGESTED} more" if len(matches) > SUGGESTED else ""
    shown = ", ".join(matches[:SUGGESTED]) + more
    return f"write NAMESPACE/NAME: {shown}?"
