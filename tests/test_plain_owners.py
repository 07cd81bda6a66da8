"""Rule 3 of the grouper (extender/grouping/fallback.py): the pods of an owner no grouper knows (a
Deployment's, a ReplicaSet's, a StatefulSet's, a kind nobody knows) are plain unless the workload
asks to be a gang; DaemonSet pods are always plain. The same rule in the grouper, in the core's
filter (extender mode) and in the webhook (gates mode gates exactly the gang members).

Cluster for the core and webhook tests: rack r1 of 2 nodes, 8 GPUs each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from extender.core.cluster import ClusterState, object_key
from extender.core.scheduler import GangScheduler
from extender.grouping import ObjectIndex, group_pods
from extender.grouping.admission import admit
from extender.grouping.names import ASKING
from extender.kube.ungate import GATE
from extender.model import annotation_keys as keys
from extender.model.pod import PodInfo, parse_pod
from extender.server.webhook import GATES, Webhook
from tests.builders import TOPO, grid, podgroup
from tests.grouping_builders import NS, errors, group, obj, only, render, template
from tests.test_gates_webhook import review

RACK = {"kai.scheduler/topology-required-placement": "rack"}
NODES = [n.name for n in grid(racks=1, nodes=2)]
KINDS = ("Deployment", "ReplicaSet", "StatefulSet")


def pod_body(
    name: str, owner: tuple[str, str] | None, annotations: Mapping[str, str] | None = None, gpus: int = 8
) -> dict[str, Any]:
    """A pod as its controller makes it: its template's annotations copied; OWNER (kind, name), apps/v1."""
    meta: dict[str, Any] = {"name": name, "namespace": NS, "annotations": dict(annotations or {})}
    if owner is not None:
        kind, oname = owner
        meta["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": oname, "uid": f"uid-{oname}", "controller": True}
        ]
    spec = template(gpus=gpus)["spec"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def workload(
    kind: str,
    replicas: int = 3,
    ann: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    gpus: int = 8,
) -> tuple[list[dict[str, Any]], list[PodInfo]]:
    """A Deployment (and its ReplicaSet), a ReplicaSet or a StatefulSet named web, and its REPLICAS
    pods: (the owner objects, the pods). ANN: the template's annotations; ANNOTATIONS: its own."""
    spec = {"replicas": replicas, "template": template(ann, gpus=gpus)}
    top = obj("apps/v1", kind, "web", metadata={"annotations": dict(annotations or {})}, spec=spec)
    owners = [top]
    direct = ("StatefulSet", "web") if kind == "StatefulSet" else ("ReplicaSet", "web")
    if kind == "Deployment":
        direct = ("ReplicaSet", "web-5d8f")
        rs_meta = {"annotations": dict(annotations or {})}  # the Deployment controller copies them
        rs = obj("apps/v1", "ReplicaSet", "web-5d8f", owner=("apps/v1", "Deployment", "web"), metadata=rs_meta)
        owners.append(rs)
    pods = [parse_pod(pod_body(f"{direct[1]}-{i}", direct, ann, gpus)) for i in range(replicas)]
    return owners, pods


# -- the grouper -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_pods_of_an_owner_without_gang_annotations_are_plain(kind: str) -> None:
    owners, pods = workload(kind)
    result = group(objects=owners, pods=pods)
    assert (dict(result.groups), dict(result.pod_group), dict(result.waiting)) == ({}, {}, {})


@pytest.mark.parametrize("kind", KINDS)
def test_a_topology_annotation_on_the_template_makes_them_one_gang_of_spec_replicas(kind: str) -> None:
    owners, pods = workload(kind, ann=RACK)
    result = group(objects=owners, pods=pods)
    part = kind.lower()
    assert render(only(result)) == [f"ml/{part}-web sub=1", f"  {part} min=3 required=rack"]
    assert set(result.pod_group) == {p.key for p in pods}
    # Its controller has made one pod so far: the gang needs all three (spec.replicas), not the one.
    one = group(objects=owners, pods=pods[:1])
    assert render(only(one)) == [f"ml/{part}-web sub=1", f"  {part} min=3 required=rack"]


def test_the_workloads_own_annotation_asks_too() -> None:
    owners, pods = workload("Deployment", annotations={"kai.scheduler/topology-preferred-placement": "block"})
    assert render(only(group(objects=owners, pods=pods))) == [
        "ml/deployment-web sub=1 preferred=block",
        "  deployment min=3",
    ]


@pytest.mark.parametrize("key", sorted(ASKING))
def test_each_asking_annotation_makes_a_gang(key: str) -> None:
    owners, pods = workload("StatefulSet", ann={key: "rack"})
    result = group(objects=owners, pods=pods)
    assert set(result.pod_group) == {p.key for p in pods}  # a gang (Invalid where "rack" is no value for KEY)


def test_every_annotation_topogang_reads_either_asks_or_is_said_not_to() -> None:
    # A key added to annotation_keys.READ must be decided here and in docs/workloads.md's list.
    asks_nothing = {
        keys.KAI_POD_INDEX_LABEL,
        keys.RUNTIME_BOUND,
        keys.MOVABLE,
        keys.LWS_EXCLUSIVE,
        keys.LWS_SUBGROUP_EXCLUSIVE,
        keys.JOBSET_EXCLUSIVE,
        keys.JOBSET_NODE_SELECTOR,
    }
    assert ASKING | asks_nothing == keys.READ
    assert not ASKING & asks_nothing


def test_a_podgroup_named_on_the_template_is_joined_whatever_the_owner() -> None:
    owners, pods = workload("Deployment", ann={"pod-group-name": "serving"})
    result = group(objects=owners, pods=pods, podgroups={"ml/serving": podgroup({"minMember": 3}, "serving", NS)})
    assert set(result.pod_group.values()) == {"ml/serving"}


@pytest.mark.parametrize(
    "ann",
    [
        {"scheduling.topogang.io/runtime-bound": "1h"},  # a plain pod may backfill with it
        {"kai.scheduler/pod-index-label": "apps.kubernetes.io/pod-index"},
        {"leaderworkerset.sigs.k8s.io/exclusive-topology": "rack"},  # read by the LWS grouper only
        {"kueue.x-k8s.io/queue-name": "team"},
        {"example.com/topology": "rack"},
    ],
    ids=lambda ann: next(iter(ann)),
)
def test_annotations_that_ask_for_nothing_leave_the_pods_plain(ann: dict[str, str]) -> None:
    owners, pods = workload("Deployment", ann=ann, annotations=ann)
    assert not group(objects=owners, pods=pods).pod_group


def test_a_misspelt_asking_annotation_makes_an_invalid_gang_that_says_so() -> None:
    typo = "kai.scheduler/topology-required-placment"
    owners, pods = workload("StatefulSet", ann={typo: "rack"})
    g = only(group(objects=owners, pods=pods))
    assert errors(g) == [
        f"StatefulSet ml/web: spec.template.metadata.annotations[{typo}]: unknown annotation;"
        " did you mean kai.scheduler/topology-required-placement?"
    ]


def test_a_daemonset_stays_plain_even_when_annotated() -> None:
    ds = obj("apps/v1", "DaemonSet", "agent", spec={"template": template(RACK)})
    pods = [parse_pod(pod_body(f"agent-{i}", ("DaemonSet", "agent"), RACK)) for i in range(3)]
    assert not group(objects=[ds], pods=pods).pod_group


def test_the_owners_template_decides_for_all_its_pods_when_seen() -> None:
    # A pod left from before the annotation was removed from the template is plain with the rest.
    owners, pods = workload("StatefulSet")
    old = parse_pod(pod_body("web-9", ("StatefulSet", "web"), RACK))
    assert not group(objects=owners, pods=[*pods, old]).pod_group


def test_an_owner_topogang_cannot_see_is_read_from_each_pods_annotations() -> None:
    body = pod_body("t-0", None, RACK)
    body["metadata"]["ownerReferences"] = [{"apiVersion": "example.com/v1", "kind": "Trainer", "name": "t"}]
    body["metadata"]["ownerReferences"][0]["controller"] = True
    asking = parse_pod(body)
    plain = parse_pod({**body, "metadata": {**body["metadata"], "name": "t-1", "annotations": {}}})
    result = group_pods([asking, plain], ObjectIndex([]), {})
    assert dict(result.pod_group) == {"ml/t-0": "ml/trainer-t"}


def test_a_rollout_surge_is_in_the_gang_beyond_its_minimum() -> None:
    owners, pods = workload("Deployment", ann=RACK)
    surge = parse_pod(pod_body("web-77aa-0", ("ReplicaSet", "web-77aa"), RACK))
    owners.append(obj("apps/v1", "ReplicaSet", "web-77aa", owner=("apps/v1", "Deployment", "web")))
    result = group(objects=owners, pods=[*pods, surge])
    assert render(only(result)) == ["ml/deployment-web sub=1", "  deployment min=3 required=rack"]
    assert len(result.pod_group) == 4


# -- extender mode: the core's filter ------------------------------------------------------------------


def scheduler_with(owners: list[dict[str, Any]], pods: list[PodInfo]) -> GangScheduler:
    state = ClusterState()
    for n in grid(racks=1, nodes=2):
        state.upsert_node(n)
    state.set_topology("default", TOPO)
    for body in owners:
        meta = body["metadata"]
        state.set_object(object_key(body["apiVersion"], body["kind"], meta["namespace"], meta["name"]), body)
    scheduler = GangScheduler(state)
    for p in pods:
        scheduler.observe_pod(p)
    return scheduler


def rs_pods(ann: Mapping[str, str] | None = None) -> tuple[list[dict[str, Any]], list[PodInfo]]:
    """A ReplicaSet's three pods: two of 8 GPUs that fit (one a node), a third of 16 that fits none."""
    owners, pods = workload("ReplicaSet", replicas=3, ann=ann)
    big = parse_pod(pod_body("web-2", ("ReplicaSet", "web"), ann, gpus=16))
    return owners, [*pods[:2], big]


def test_rs_pods_that_fit_pass_filter_though_a_third_needs_16_gpus() -> None:
    owners, pods = rs_pods()
    scheduler = scheduler_with(owners, pods)
    for p in pods[:2]:
        result = scheduler.filter(p, NODES, 0.0)
        assert (result.nodes, result.group) == (NODES, None)
    # The third is plain too: kube-scheduler's own filters find no node for it, topogang none.
    assert scheduler.filter(pods[2], NODES, 0.0).group is None


def test_rs_pods_that_ask_for_a_gang_are_refused_whole_when_the_third_fits_nowhere() -> None:
    owners, pods = rs_pods({"kai.scheduler/topology": "default"})
    scheduler = scheduler_with(owners, pods)
    result = scheduler.filter(pods[0], NODES, 0.0)
    assert (result.nodes, result.group) == ([], "ml/replicaset-web")
    assert "1 pod x {cpu: 1, nvidia.com/gpu: 16} in the cluster; only 0 fit" in result.reason, result.reason


# -- gates mode: the webhook gates exactly the gang members ---------------------------------------------


def test_gates_mode_does_not_gate_plain_replicaset_pods_and_gates_annotated_ones() -> None:
    plain_rs = obj("apps/v1", "ReplicaSet", "web", spec={"replicas": 2, "template": template()})
    asking_rs = obj("apps/v1", "ReplicaSet", "train", spec={"replicas": 2, "template": template(RACK)})
    state = ClusterState()
    for body in (plain_rs, asking_rs):
        state.set_object(object_key("apps/v1", "ReplicaSet", NS, body["metadata"]["name"]), body)
    webhook = Webhook(GangScheduler(state), GATES, lambda: True)
    _, plain = review(webhook, pod_body("web-0", ("ReplicaSet", "web")))
    assert "schedulingGates" not in plain["spec"]
    _, gated = review(webhook, pod_body("train-0", ("ReplicaSet", "train"), RACK))
    assert gated["spec"]["schedulingGates"] == [{"name": GATE}]


def test_admission_manages_exactly_the_pods_the_grouper_makes_gang_members_or_waits() -> None:
    owners: list[dict[str, Any]] = []
    pods: list[PodInfo] = []
    for kind, ann in (("Deployment", None), ("StatefulSet", RACK)):
        o, ps = workload(kind, ann=ann)
        owners += o
        pods += ps
    ds = obj("apps/v1", "DaemonSet", "agent", spec={"template": template(RACK)})
    owners.append(ds)
    pods.append(parse_pod(pod_body("agent-0", ("DaemonSet", "agent"), RACK)))
    lone = pod_body("lone", None, RACK)
    lone["metadata"]["ownerReferences"] = [{"apiVersion": "x/v1", "kind": "Y", "name": "y", "controller": True}]
    pods += [parse_pod(lone), parse_pod(pod_body("bare", None))]
    objects = ObjectIndex(owners)
    together = group_pods(pods, objects, {})
    managed = {p.key for p in pods if admit(p, objects, {}).managed}
    assert managed == set(together.pod_group) | set(together.waiting)
    assert managed == {"ml/web-0", "ml/web-1", "ml/web-2", "ml/lone"}
