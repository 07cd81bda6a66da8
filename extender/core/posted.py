"""Bindings topogang posted itself that its watch has not shown yet.

kube-scheduler counts a node's room from its own cache: the pods its informer saw bound plus the
pods it assumed on its way to binding them (a pod stays assumed while its bind call waits). A
pod topogang binds with no bind call waiting for it (a gang bound ahead, or members whose calls
were answered past their budget, which kube-scheduler then forgot) is not in that cache, so
until kube-scheduler's informer sees the binding, its filters count that room free and it would
bind a plain pod into it. topogang's watch showing the pod bound is the nearest sign it has that
kube-scheduler's informer, fed by the same API server, does too; until then the plain-pod filter
checks fit on those nodes (`Plans.admit_plain`). It is not proof (kube-scheduler's informer may
show it later): the plain pod's bind call is checked against topogang's own count as well
(`BindGate._plain`). topogang's own accounting needs no help: the pod counts as bound on its node
from the moment its Binding succeeded.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from extender.model.pod import PodInfo


class PostedBindings:
    def __init__(self) -> None:
        self.pods: dict[str, tuple[str, str]] = {}  # pod -> (node, uid)
        self.nodes: Counter[str] = Counter()  # node -> pods of `pods` on it

    def seen(self, pod: PodInfo, known: PodInfo | None, posted: bool) -> PodInfo:
        """POSTED: POD was just bound by topogang's Binding; else POD came from the watch. KNOWN:
        the pod as the cluster view has it now. Returns POD as planning must see it: a watch event
        older than the Binding (the same uid, no node yet) leaves the pod on its node."""
        if posted:
            if pod.node_name is not None and (known is None or known.node_name != pod.node_name):
                self.forget(pod.key)
                self.pods[pod.key] = (pod.node_name, pod.uid)  # (else the watch showed it first)
                self.nodes[pod.node_name] += 1
            return pod
        mark = self.pods.get(pod.key) if self.pods else None
        if mark is None:
            return pod
        if pod.node_name is None and pod.uid == mark[1] and not pod.terminal and not pod.deleting:
            return replace(pod, node_name=mark[0])  # a bound pod never loses its node
        self.forget(pod.key)  # shown bound (or gone): kube-scheduler's informer can see it too
        return pod

    def forget(self, key: str) -> None:
        mark = self.pods.pop(key, None)
        if mark is not None:
            self.nodes[mark[0]] -= 1
            if not self.nodes[mark[0]]:
                del self.nodes[mark[0]]
