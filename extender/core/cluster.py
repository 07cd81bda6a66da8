"""ClusterState: the in-memory view of the objects topogang plans with.

Nodes, pods, PodGroups, Topologies, PriorityClasses, workload owners and ResourceInterfaces,
keyed as the API server keys them, plus two usage ledgers (bound pods, reservations). The
NodeTable and the ledgers are rebuilt only when a node changes in a way that matters to
planning (labels, capacity, taints, readiness); heartbeats do not rebuild anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from extender.core.dra import DeviceInventory
from extender.core.dra.inventory import CLAIMS, DEVICES, DraObject
from extender.core.dra.pods import ClaimedPods
from extender.core.posted import PostedBindings
from extender.core.usage import PlanningUsage, UsageLedger
from extender.model.budget import DisruptionBudget
from extender.model.errors import FieldError
from extender.model.flavor import ResourceFlavor
from extender.model.node import NodeInfo
from extender.model.pod import PLAN_GENERATION_ANNOTATION, PodInfo
from extender.model.podgroup import PodGroupSpec
from extender.model.topology import TopologySpec
from extender.placement import ClusterSnapshot, NodeTable

# Deletions remembered against late requests: far more than kube-scheduler can have in flight.
DELETED_UIDS_KEPT = 20_000

ObjectKey = tuple[str, str, str, str]  # (apiVersion group, kind, namespace, name)

# The PriorityClasses every API server has and none can delete (scheduling.k8s.io's built-ins).
SYSTEM_PRIORITY_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}


def object_key(api_version: str, kind: str, namespace: str | None, name: str) -> ObjectKey:
    return (api_version.rpartition("/")[0], kind, namespace or "", name)


class ClusterState:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        # pod -> the order we first saw it in: kube-scheduler queues new pods in the order its
        # own watch saw them, so members nominated in this order meet it at the head of its queue.
        self.arrival: dict[str, int] = {}
        self._arrivals = 0
        # nodes where bound pods gave room back (left, finished, shrank); its reader empties it
        self.freed: set[str] = set()
        self.podgroups: dict[str, PodGroupSpec] = {}
        self.invalid_podgroups: dict[str, tuple[FieldError, ...]] = {}
        self.topologies: dict[str, TopologySpec] = {}
        self.priority_classes: dict[str, int] = {}
        self.global_default: dict[str, int] = {}  # PriorityClasses with globalDefault: true
        self.budgets: dict[str, DisruptionBudget] = {}  # PodDisruptionBudgets, by namespace/name
        self.objects: dict[ObjectKey, Mapping[str, Any]] = {}
        # the same objects by (API group, kind, namespace), then name: a kind's objects of one
        # namespace without a scan (the children of a scheduling.k8s.io CompositePodGroup)
        self._by_namespace: dict[tuple[str, str, str], dict[str, Mapping[str, Any]]] = {}
        self.resource_interfaces: dict[str, Mapping[str, Any]] = {}
        self.flavors: dict[str, ResourceFlavor] = {}  # Kueue ResourceFlavors by name
        self.queue_apis: set[str] = set()  # the queue kinds installed (core.queues.QUEUE_KINDS)
        self.queues: set[tuple[str, str, str]] = set()  # (kind, namespace, name)
        self.reservations: dict[str, tuple[str, Mapping[str, int]]] = {}  # pod -> (node, requests)
        # node -> pods reserved on it that kube-scheduler's cache does not hold (the plain-pod
        # filter checks those nodes); a pod it holds assumed while binding is in `assumed` only
        self.reserved_nodes: Counter[str] = Counter()
        self.assumed: set[str] = set()
        self.reserved_version = 0  # bumps when a reservation is made or let go (`version` does not)
        # Pods topogang bound with Bindings of its own that its watch has not shown bound yet:
        # kube-scheduler's cache may not have them (core/posted.py).
        self.posted = PostedBindings()
        # Unbound pods another scheduler nominated to a node (status.nominatedNodeName), topogang's
        # own steering aside: pod -> node (core/nominated.py counts them when gangs are planned).
        self.nominated: dict[str, str] = {}
        self.nominations_released = 0  # how many left `nominated` (their room may be free)
        # uids of pods deleted lately, oldest first: a filter call kube-scheduler sent before it
        # saw a deletion can reach us after our watch did, and must not bring the pod back.
        self._deleted_uids: dict[str, None] = {}
        self.generation = 0  # bumps when the node set changes
        self.version = 0  # bumps on every change to groups, pods, topologies or owners
        self._table: NodeTable | None = None
        self._bound: UsageLedger | None = None
        self._reserved: UsageLedger | None = None
        self._listeners: list[Callable[[str, object], None]] = []
        # Dynamic Resource Allocation: slices, classes, claims, templates, and the pods with claims
        # (their `requests` carry the devices still needed, refreshed when `table` is next read).
        self.devices = DeviceInventory()
        self.claimed = ClaimedPods(self.devices)
        self._stale_pods: set[str] = set()

    def subscribe(self, listener: Callable[[str, object], None]) -> None:
        """Call `listener(kind, key)` on every change: kind is pod, node (added or changed),
        podgroup, topology, object, resource_interface, priority_class or budget; key is what
        the API server keys it by."""
        self._listeners.append(listener)

    def _notify(self, kind: str, key: object) -> None:
        self.version += 1
        for listener in self._listeners:
            listener(kind, key)

    # -- nodes -----------------------------------------------------------------------------------

    def upsert_node(self, node: NodeInfo) -> bool:
        """Store `node`; True when planning must see a new node generation."""
        if self.nodes.get(node.name) == node:
            return False
        self.nodes[node.name] = node
        self._invalidate_nodes()
        self._notify("node", node.name)
        return True

    def delete_node(self, name: str) -> bool:
        if self.nodes.pop(name, None) is None:
            return False
        self._invalidate_nodes()
        return True

    def _invalidate_nodes(self) -> None:
        self.generation += 1
        self.version += 1
        self._table = self._bound = self._reserved = None

    @property
    def table(self) -> NodeTable:
        if self._table is None:
            nodes = sorted(self.nodes.values(), key=lambda n: n.name)
            self._table = NodeTable(nodes, self.generation, self.devices)
            self._bound, self._reserved = UsageLedger(self._table), UsageLedger(self._table)
            for pod in self.pods.values():
                if pod.uses_capacity and pod.node_name is not None:
                    self._bound.add(pod.node_name, pod.requests)
            for node, requests in self.reservations.values():
                self._reserved.add(node, requests)
            self._stale_pods.update(self.claimed.raw)  # nodes or devices changed: count claims again
        if self._stale_pods:  # pods whose claims, templates or devices changed
            stale, self._stale_pods = self._stale_pods, set()
            for key in sorted(stale):
                if (raw := self.claimed.raw.get(key)) is not None and key in self.pods:
                    self.upsert_pod(raw)
        return self._table

    @property
    def bound(self) -> UsageLedger:
        _ = self.table
        assert self._bound is not None
        return self._bound

    @property
    def reserved(self) -> UsageLedger:
        _ = self.table
        assert self._reserved is not None
        return self._reserved

    # -- pods ------------------------------------------------------------------------------------

    def upsert_pod(self, pod: PodInfo) -> PodInfo | None:
        """Store `pod`; returns the version it replaced."""
        if pod.claims or pod.key in self.claimed.raw:  # its devices join its requests
            others = self.claimed.track(pod, pod.key)  # pods sharing a claim with it
            pod = self.claimed.derive(pod, self.table.nodes)
            self._stale_pods |= others
        old = self.pods.get(pod.key)
        if old == pod:
            return old
        if old is not None and old.uses_capacity and old.node_name is not None:
            there = pod.uses_capacity and pod.node_name == old.node_name
            if not there or any(pod.requests.get(r, 0) < v for r, v in old.requests.items()):
                self.freed.add(old.node_name)
        if self._bound is not None:
            if old is not None and old.uses_capacity and old.node_name:
                self._bound.add(old.node_name, old.requests, -1)
            if pod.uses_capacity and pod.node_name:
                self._bound.add(pod.node_name, pod.requests)
        self.pods[pod.key] = pod
        if pod.nominated_node is not None and _nominated_elsewhere(pod):
            self.nominated[pod.key] = pod.nominated_node
        elif self.nominated and self.nominated.pop(pod.key, None) is not None:
            self.nominations_released += 1
        if old is not None and old.requests != pod.requests and pod.key in self.reservations:
            self.reserve(pod.key, self.reservations[pod.key][0], pod.requests)  # its claim was allocated
        if old is None:
            self._arrivals += 1
            self.arrival[pod.key] = self._arrivals
        self._notify("pod", pod.key)
        return old

    def delete_pod(self, key: str) -> PodInfo | None:
        if key in self.claimed.raw:
            self._stale_pods |= self.claimed.track(None, key)
        old = self.pods.pop(key, None)
        self.arrival.pop(key, None)
        if self.nominated.pop(key, None) is not None:
            self.nominations_released += 1
        self.posted.forget(key)
        if old is not None:
            self._remember_deleted(old.uid)
            if old.uses_capacity and old.node_name:
                self.freed.add(old.node_name)
                if self._bound is not None:
                    self._bound.add(old.node_name, old.requests, -1)
            self._notify("pod", key)
        return old

    def _remember_deleted(self, uid: str) -> None:
        if not uid:
            return
        self._deleted_uids[uid] = None
        if len(self._deleted_uids) > DELETED_UIDS_KEPT:
            del self._deleted_uids[next(iter(self._deleted_uids))]

    def was_deleted(self, pod: PodInfo) -> bool:
        """Whether POD (by uid) was deleted: a late request about it must not bring it back."""
        return bool(pod.uid) and pod.uid in self._deleted_uids

    # -- reservations ------------------------------------------------------------------------------

    def reserve(self, pod: str, node: str, requests: Mapping[str, int], assumed: bool = False) -> None:
        """ASSUMED: kube-scheduler holds POD assumed on NODE (its bind call is under way), so its
        own filters count the room and the plain-pod filter need not check the node for it."""
        self.unreserve(pod)
        self.reserved_version += 1
        self.reservations[pod] = (node, requests)
        if assumed:
            self.assumed.add(pod)
        else:
            self.reserved_nodes[node] += 1
        if self._reserved is not None:
            self._reserved.add(node, requests)

    def unreserve(self, pod: str) -> None:
        held = self.reservations.pop(pod, None)
        if held is None:
            return
        self.reserved_version += 1
        if pod in self.assumed:
            self.assumed.discard(pod)
        else:
            self.reserved_nodes[held[0]] -= 1
            if not self.reserved_nodes[held[0]]:
                del self.reserved_nodes[held[0]]
        if self._reserved is not None:
            self._reserved.add(held[0], held[1], -1)

    # -- other objects -------------------------------------------------------------------------------

    def set_podgroup(self, key: str, spec: PodGroupSpec | None, errors: tuple[FieldError, ...] = ()) -> None:
        if spec is not None and self.podgroups.get(key) == spec:
            return  # a status update (topogang's own, every few seconds): nothing that groups or plans changed
        if spec is None and errors and self.invalid_podgroups.get(key) == errors:
            return
        self.podgroups.pop(key, None)
        self.invalid_podgroups.pop(key, None)
        if spec is not None:
            self.podgroups[key] = spec
        elif errors:
            self.invalid_podgroups[key] = errors
        self._notify("podgroup", key)

    def set_topology(self, name: str, spec: TopologySpec | None) -> None:
        if spec is None:
            self.topologies.pop(name, None)
        else:
            self.topologies[name] = spec
        self._notify("topology", name)

    def set_object(self, key: ObjectKey, body: Mapping[str, Any] | None) -> None:
        group, kind, namespace, name = key
        if body is None:
            self.objects.pop(key, None)
            same = self._by_namespace.get((group, kind, namespace))
            if same is not None:
                same.pop(name, None)
                if not same:
                    del self._by_namespace[(group, kind, namespace)]
        else:
            self.objects[key] = body
            self._by_namespace.setdefault((group, kind, namespace), {})[name] = body
        self._notify("object", key)

    def in_namespace(self, api_version: str, kind: str, namespace: str) -> list[Mapping[str, Any]]:
        """Every object of that kind (any version of its API group) in the namespace."""
        return list(self._by_namespace.get((api_version.rpartition("/")[0], kind, namespace), {}).values())

    def set_flavor(self, name: str, flavor: ResourceFlavor | None) -> None:
        if flavor is None:
            self.flavors.pop(name, None)
        else:
            self.flavors[name] = flavor
        self._notify("flavor", name)

    def set_queue_api(self, kind: str, installed: bool) -> None:
        """Whether a queue kind's API is installed (an informer's list, or a CRD in the input)."""
        if installed:
            self.queue_apis.add(kind)
        else:
            self.queue_apis.discard(kind)
        self._notify("queue", kind)

    def set_queue(self, key: tuple[str, str, str], present: bool) -> None:
        if present:
            self.queues.add(key)
            self.queue_apis.add(key[0])  # an object of the kind: its API is installed
        else:
            self.queues.discard(key)
        self._notify("queue", key)

    def set_resource_interface(self, name: str, body: Mapping[str, Any] | None) -> None:
        if body is None:
            self.resource_interfaces.pop(name, None)
        else:
            self.resource_interfaces[name] = body
        self._notify("resource_interface", name)

    def set_budget(self, key: str, budget: DisruptionBudget | None) -> None:
        """A PodDisruptionBudget; only preemption reads them. Listeners hear of it only when what
        preemption reads changed (its selector, how many pods may go): the disruption controller
        writes its status far more often than that."""
        if self.budgets.get(key) == budget:
            return
        if budget is None:
            self.budgets.pop(key, None)
        else:
            self.budgets[key] = budget
        self._notify("budget", key)

    def set_priority_class(self, name: str, value: int | None, global_default: bool = False) -> None:
        self.global_default.pop(name, None)
        if value is None:
            self.priority_classes.pop(name, None)
        else:
            self.priority_classes[name] = value
            if global_default:
                self.global_default[name] = value
        self._notify("priority_class", name)

    def class_priority(self, name: str) -> int | None:
        """The value of PriorityClass NAME, the API server's built-in system classes included."""
        found = self.priority_classes.get(name)
        return found if found is not None else SYSTEM_PRIORITY_CLASSES.get(name)

    # -- planning view ---------------------------------------------------------------------------------

    def snapshot(
        self,
        give_back: Mapping[str, Mapping[str, int]] | None = None,
        taken: Mapping[str, Mapping[str, int]] | None = None,
    ) -> ClusterSnapshot:
        """Free capacity: allocatable (and devices) - bound pods - reservations - devices claims
        hold, plus what `give_back` returns, minus what `taken` takes (node -> requests)."""
        table = self.table
        held = partial(self.devices.allocated, nodes=table.nodes)
        return ClusterSnapshot(table, PlanningUsage(self.bound, self.reserved, give_back or {}, held, taken or {}))

    def free_on(self, node: str, resource: str) -> int:
        table = self.table  # once: every steered filter call asks this of each of its node's resources
        i = table.index.get(node)
        if i is None:
            return 0
        held = self.devices.allocated(resource, table.nodes)
        free = int(table.alloc(resource)[i]) - self.bound.at_index(i, resource) - self.reserved.at_index(i, resource)
        return free - int(held[i]) if held is not None else free

    def set_dra(self, kind: str, key: str, found: DraObject | None) -> None:
        """A ResourceSlice or DeviceClass (by name), a ResourceClaim or ResourceClaimTemplate (by
        namespace/name) came or changed (FOUND), or went (None)."""
        changed = self.devices.set(kind, key, found)
        if changed == DEVICES:  # capacity per node: the table's rebuild counts every claim again
            self._invalidate_nodes()
        elif changed == CLAIMS:
            self._stale_pods |= self.claimed.readers(key, template=kind == "ResourceClaimTemplate")
        if changed is not None:
            self._notify("devices", key)

    def pod_priority(self, pod: PodInfo) -> int:
        """As the API server's Priority admission resolves it (live pods carry its answer in
        spec.priority; pods read from files, in the simulator and `explain`, may not): the pod's
        own value, else its class's, else the globalDefault class's, else 0."""
        if pod.priority is not None:
            return pod.priority
        if pod.priority_class_name:
            return self.class_priority(pod.priority_class_name) or 0
        if self.global_default:  # the API server allows one; should two be seen, the lowest name
            return self.global_default[min(self.global_default)]
        return 0


def _nominated_elsewhere(pod: PodInfo) -> bool:
    """POD waits for the node another scheduler nominated it to: unbound, alive, and not steered
    there by topogang (whose nominations of planned members are reservations already, and are
    written with its plan-generation annotation)."""
    return (
        pod.node_name is None
        and not pod.terminal
        and not pod.deleting
        and PLAN_GENERATION_ANNOTATION not in pod.annotations
    )


def shortfall(state: ClusterState, node: str, requests: Mapping[str, int]) -> tuple[str, int, int] | None:
    """The first resource NODE has less of free than REQUESTS ask, as STATE counts (bound pods,
    reservations, devices claims hold): (resource, free, asked); None when they fit."""
    for resource, asked in requests.items():
        free = state.free_on(node, resource)
        if free < asked:
            return resource, free, asked
    return None
