"""Grove: pods grouped by the PodGang their grove.io/podgang label names (KAI's Grove plugin), the
PodGang's PodGroups as SubGroups with their minReplicas, its topologyConstraintGroupConfigs as
parent SubGroups, packConstraints as levels; pods join their PodClique's SubGroup; what Grove's
operator creates is synthesized; a ResourceInterface on Dynamo's object hands off to it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.core.apply import apply_object
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.grouping import ObjectIndex, family_key, group_pods, synthesize
from extender.grouping.kinds.grove import PODGANG
from extender.model.errors import InvalidObject
from extender.model.pod import PodInfo, parse_pod
from tests.grouping_builders import NS, errors, group, members, pods_of, render

JSON = dict[str, Any]


def clique(name: str, replicas: int, minimum: int | None = None, pack: JSON | None = None) -> JSON:
    spec: JSON = {"roleName": name, "replicas": replicas, "podSpec": {"containers": [{"name": "c"}]}}
    if minimum is not None:
        spec["minAvailable"] = minimum
    out: JSON = {"name": name, "spec": spec}
    if pack is not None:
        out["topologyConstraint"] = {"pack": pack}
    return out


def pcs(replicas: int = 1, sg_replicas: int = 3, sg_min: int = 2, name: str = "llm") -> JSON:
    """A frontend, and a prefill scaling group (leader + 3 workers, 2 of them required)."""
    return {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "PodCliqueSet",
        "metadata": {"name": name, "namespace": NS, "uid": "uid-pcs"},
        "spec": {
            "replicas": replicas,
            "template": {
                "topologyConstraint": {"topologyName": "default", "pack": {"required": "zone"}},
                "cliques": [
                    clique("frontend", 1),
                    clique("leader", 1),
                    clique("worker", 3, 2, pack={"preferred": "host"}),
                ],
                "podCliqueScalingGroups": [
                    {
                        "name": "prefill",
                        "cliqueNames": ["leader", "worker"],
                        "replicas": sg_replicas,
                        "minAvailable": sg_min,
                        "topologyConstraint": {"pack": {"required": "rack"}},
                    }
                ],
            },
        },
    }


def made(workload: JSON) -> tuple[list[PodInfo], dict[tuple[str, str], JSON]]:
    pods, owners = pods_of(workload)
    return pods, {(o["kind"], o["metadata"]["name"]): o for o in owners}


def test_one_podgroup_per_podgang_its_podgroups_as_subgroups_its_group_configs_as_parents() -> None:
    result = group(pcs())
    assert {k: render(g) for k, g in result.groups.items()} == {
        "ml/podgang-llm-0": [
            "ml/podgang-llm-0 sub=3 required=zone",
            "  llm-0-prefill-0  required=rack",
            "    llm-0-prefill-0-leader min=1",
            "    llm-0-prefill-0-worker min=2 preferred=kubernetes.io/hostname",
            "  llm-0-prefill-1  required=rack",
            "    llm-0-prefill-1-leader min=1",
            "    llm-0-prefill-1-worker min=2 preferred=kubernetes.io/hostname",
            "  llm-0-frontend min=1",
        ],
        # the scaling group's replica beyond minAvailable is its own PodGang, under the group's constraint
        "ml/podgang-llm-0-prefill-0": [
            "ml/podgang-llm-0-prefill-0 sub=2 required=rack",
            "  llm-0-prefill-2-leader min=1",
            "  llm-0-prefill-2-worker min=2 preferred=kubernetes.io/hostname",
        ],
    }
    assert not result.waiting
    base = result.groups["ml/podgang-llm-0"]
    assert base.podgroup is not None
    assert base.podgroup.topology_name == "default"  # grove.io/topology-name


def test_pods_join_their_podcliques_subgroup_and_the_gang_is_owned_by_the_podgang() -> None:
    result = group(pcs(sg_replicas=2, sg_min=2))
    g = result.groups["ml/podgang-llm-0"]
    assert members(g) == {
        "llm-0-frontend": ["llm-0-frontend-0"],
        "llm-0-prefill-0-leader": ["llm-0-prefill-0-leader-0"],
        "llm-0-prefill-0-worker": [f"llm-0-prefill-0-worker-{i}" for i in range(3)],
        "llm-0-prefill-1-leader": ["llm-0-prefill-1-leader-0"],
        "llm-0-prefill-1-worker": [f"llm-0-prefill-1-worker-{i}" for i in range(3)],
    }
    assert g.owner is not None
    assert (g.owner.api_version, g.owner.kind, g.owner.name) == ("scheduler.grove.io/v1alpha1", "PodGang", "llm-0")
    assert g.source == "PodGang ml/llm-0 (of PodCliqueSet ml/llm)"


def test_synthesized_as_grove_creates_them() -> None:
    pods, owners = made(pcs(replicas=1, sg_replicas=3, sg_min=2))
    assert sorted(k for k in owners if k[0] != "PodClique") == [
        ("PodCliqueScalingGroup", "llm-0-prefill"),
        ("PodGang", "llm-0"),
        ("PodGang", "llm-0-prefill-0"),
    ]
    worker = next(p for p in pods if p.name == "llm-0-prefill-2-worker-1")
    assert {k: v for k, v in worker.labels.items() if k.startswith("grove.io/")} == {
        "grove.io/podgang": "llm-0-prefill-0",
        "grove.io/base-podgang": "llm-0",
        "grove.io/podclique": "llm-0-prefill-2-worker",
        "grove.io/podclique-pod-index": "1",
        "grove.io/podcliqueset-replica-index": "0",
        "grove.io/podcliquescalinggroup": "llm-0-prefill",
        "grove.io/podcliquescalinggroup-replica-index": "2",
    }
    assert worker.controller is not None
    assert (worker.controller.kind, worker.controller.name) == ("PodClique", "llm-0-prefill-2-worker")
    pclq = owners[("PodClique", "llm-0-prefill-2-worker")]
    assert pclq["metadata"]["ownerReferences"][0]["name"] == "llm-0-prefill"  # its scaling group
    scaled = owners[("PodGang", "llm-0-prefill-0")]
    assert scaled["metadata"]["annotations"] == {"grove.io/topology-name": "default"}
    assert scaled["spec"]["topologyConstraint"] == {"packConstraint": {"required": "rack"}}
    assert [(p["name"], p["minReplicas"], len(p["podReferences"])) for p in scaled["spec"]["podgroups"]] == [
        ("llm-0-prefill-2-leader", 1, 1),
        ("llm-0-prefill-2-worker", 2, 3),
    ]


def podgang_objects(workload: JSON) -> tuple[list[PodInfo], list[JSON], JSON]:
    """(pods, owners without the base PodGang, the base PodGang)."""
    pods, owners = pods_of(workload)
    base = next(o for o in owners if o["kind"] == "PodGang" and o["metadata"]["name"] == "llm-0")
    return pods, [o for o in owners if o is not base], base


def regroup(workload: JSON, podgang: JSON, *extra: JSON) -> Any:
    pods, owners, _ = podgang_objects(workload)
    return group_pods(pods, ObjectIndex([workload, *owners, podgang, *extra]), {})


def test_pods_wait_while_their_podgang_is_not_visible() -> None:
    workload = pcs(sg_replicas=2)
    pods, owners, _ = podgang_objects(workload)
    result = group_pods(pods, ObjectIndex([workload, *owners]), {})
    assert not result.groups
    assert result.waiting["ml/llm-0-frontend-0"] == (
        "PodGang ml/llm-0 (its grove.io/podgang label) is not visible yet; it decides the PodGroup"
    )
    assert len(result.waiting) == 9


BAD: list[tuple[str, Any, list[str]]] = [
    (
        "min-replicas-zero",
        lambda s: s["podgroups"][0].update(minReplicas=0),
        ["PodGang ml/llm-0: spec.podgroups[0].minReplicas: expected an integer >= 1, got 0"],
    ),
    (
        "min-replicas-a-string",
        lambda s: s["podgroups"][0].update(minReplicas="2"),
        ["PodGang ml/llm-0: spec.podgroups[0].minReplicas: expected an integer >= 1, got '2'"],
    ),
    (
        "min-replicas-beyond-the-limit",
        lambda s: s["podgroups"][0].update(minReplicas=10**9),
        [
            "PodGang ml/llm-0: spec.podgroups[0].minReplicas: is 1,000,000,000;"
            " topogang's limit is 100,000 (the README lists the limits)"
        ],
    ),
    (
        "required-level-not-a-string",
        lambda s: s.update(topologyConstraint={"packConstraint": {"required": 5}}),
        ["PodGang ml/llm-0: spec.topologyConstraint.packConstraint.required: expected a node label key, got 5"],
    ),
    (
        "group-config-names-an-unknown-podgroup",
        lambda s: s["topologyConstraintGroupConfigs"][0]["podGroupNames"].append("llm-0-decode"),
        [
            "PodGang ml/llm-0: spec.topologyConstraintGroupConfigs[0].podGroupNames: names 'llm-0-decode', which"
            " spec.podgroups does not list (have: llm-0-frontend, llm-0-prefill-0-leader, llm-0-prefill-0-worker,"
            " llm-0-prefill-1-leader, llm-0-prefill-1-worker)"
        ],
    ),
    (
        "a-podgroup-in-two-group-configs",
        lambda s: s["topologyConstraintGroupConfigs"][1]["podGroupNames"].append("llm-0-prefill-0-leader"),
        [
            "PodGang ml/llm-0: spec.topologyConstraintGroupConfigs[1].podGroupNames: 'llm-0-prefill-0-leader'"
            " is in 'llm-0-prefill-0' already: a PodGroup belongs to one group"
        ],
    ),
    (
        "a-pod-of-another-namespace",
        lambda s: s["podgroups"][0]["podReferences"][0].update(namespace="other"),
        [
            "PodGang ml/llm-0: spec.podgroups[0].podReferences[0].namespace: is 'other':"
            " a PodGang lists pods of its own namespace 'ml' only"
        ],
    ),
    (
        "a-pod-listed-under-another-podclique",
        lambda s: s["podgroups"][1]["podReferences"].append(s["podgroups"][0]["podReferences"].pop()),
        [
            "PodGang ml/llm-0: spec.podgroups[1].podReferences: lists Pod llm-0-frontend-0 under"
            " llm-0-prefill-0-leader, but its PodClique is llm-0-frontend"
        ],
    ),
    (
        "a-pod-listed-twice",
        lambda s: s["podgroups"][1]["podReferences"].append(s["podgroups"][0]["podReferences"][0]),
        [
            "PodGang ml/llm-0: spec.podgroups[1].podReferences[1]: lists Pod llm-0-frontend-0,"
            " which spec.podgroups[0].podReferences lists already"
        ],
    ),
    (
        "podgroups-not-a-list",
        lambda s: s.update(podgroups={"a": 1}, topologyConstraintGroupConfigs=[]),
        ["PodGang ml/llm-0: spec.podgroups: expected a list, got an object"],
    ),
]


@pytest.mark.parametrize(("change", "want"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_bad_podgang_field_makes_its_gang_invalid_naming_the_field(change: Any, want: list[str]) -> None:
    workload = pcs(sg_replicas=2)
    _, _, base = podgang_objects(workload)
    bad = copy.deepcopy(base)
    change(bad["spec"])
    g = regroup(workload, bad).groups["ml/podgang-llm-0"]
    assert g.podgroup is None
    assert sorted({e for e in errors(g) if e.startswith("PodGang")}) == sorted(want)


def test_a_pod_without_its_podgang_label_is_reported_on_the_podcliqueset() -> None:
    workload = pcs(sg_replicas=2)
    pods, owners, base = podgang_objects(workload)
    body = synthesize(workload).pods[0]
    assert body["metadata"]["name"] == "llm-0-frontend-0"
    del body["metadata"]["labels"][PODGANG]
    others = [p for p in pods if p.name != "llm-0-frontend-0"]
    result = group_pods([parse_pod(body), *others], ObjectIndex([workload, *owners, base]), {})
    g = result.groups["ml/podcliqueset-llm"]
    assert errors(g) == [
        "Pod ml/llm-0-frontend-0: metadata.labels[grove.io/podgang]: missing: Grove names the pod's PodGang in it"
    ]
    assert result.groups["ml/podgang-llm-0"].podgroup is not None


def test_kai_placement_annotations_fill_in_what_the_podgang_leaves_unset() -> None:
    workload = pcs(sg_replicas=2)
    _, _, base = podgang_objects(workload)
    base = copy.deepcopy(base)
    base["metadata"]["annotations"] = {
        "grove.io/topology-name": "default",
        "kai.scheduler/topology-required-placement": "block",  # the PodGang's own zone wins
        "kai.scheduler/topology-preferred-placement": "rack",
    }
    g = regroup(workload, base).groups["ml/podgang-llm-0"]
    assert render(g)[0] == "ml/podgang-llm-0 sub=3 required=zone preferred=rack"
    assert g.warnings == (
        "PodGang ml/llm-0: kai.scheduler/topology-required-placement ignored:"
        " spec.topologyConstraint.packConstraint.required sets it",
    )


def dynamo(workload: JSON) -> JSON:
    """The PodCliqueSet owned by a DynamoGraphDeployment topogang does not watch."""
    owned = copy.deepcopy(workload)
    ref = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment", "name": "dgd", "controller": True}
    owned["metadata"]["ownerReferences"] = [ref]
    return owned


HANDOFF_RI = {
    "apiVersion": "scheduling.topogang.io/v1alpha1",
    "kind": "ResourceInterface",
    "metadata": {"name": "dynamo"},
    "spec": {"targetGVK": {"group": "nvidia.com", "version": "v1alpha1", "kind": "DynamoGraphDeployment"}},
}


@pytest.mark.parametrize("with_ri", [False, True], ids=["no-resource-interface", "hand-off-resource-interface"])
def test_dynamo_pods_reach_the_grove_grouper_below_dynamos_object(with_ri: bool) -> None:
    # DynamoGraphDeployment -> PodCliqueSet -> PodClique -> Pod; Dynamo's object is never visible.
    # A ResourceInterface without podGroups on it hands off without reading it (before, the pods
    # waited for it forever).
    workload = dynamo(pcs(sg_replicas=2))
    pods, owners = pods_of(workload)
    result = group_pods(pods, ObjectIndex([workload, *owners, *([HANDOFF_RI] if with_ri else [])]), {})
    assert not result.waiting
    assert set(result.groups) == {"ml/podgang-llm-0"}
    assert set(result.pod_group) == {p.key for p in pods}


def test_a_resource_interface_with_podgroups_on_an_invisible_owner_still_waits_for_it() -> None:
    workload = dynamo(pcs(sg_replicas=2))
    pods, owners = pods_of(workload)
    ri = copy.deepcopy(HANDOFF_RI)
    ri["spec"]["gangScheduling"] = {"podGroups": [{"subgroups": [{"componentName": "all", "minReplicas": "1"}]}]}
    result = group_pods(pods, ObjectIndex([workload, *owners, ri]), {})
    assert not result.groups
    assert result.waiting["ml/llm-0-frontend-0"].startswith("DynamoGraphDeployment ml/dgd is not visible yet")


def test_the_podgang_is_a_read_of_its_pods_family() -> None:
    workload = pcs(sg_replicas=2)
    pods, owners = pods_of(workload)
    by_key = {p.key: p for p in pods}
    family, reads = family_key(by_key["ml/llm-0-frontend-0"], ObjectIndex([workload, *owners]), by_key)
    assert family is not None
    assert (family.kind, str(family.key)) == ("PodCliqueSet", "ml/llm")
    assert reads == (("PodClique", NS, "llm-0-frontend"), ("PodCliqueSet", NS, "llm"), ("PodGang", NS, "llm-0"))


def test_a_changed_podgang_regroups_its_pods_in_the_scheduler() -> None:
    workload = pcs(sg_replicas=2)
    s = synthesize(workload)
    scheduler = GangScheduler(ClusterState())
    for body in (workload, *s.owners, *s.pods):
        apply_object(scheduler, body)
    view = scheduler.membership.view("ml/podgang-llm-0")
    assert view.spec is not None
    assert [sg.min_member for sg in view.spec.subgroups if sg.name == "llm-0-frontend"] == [1]
    base = copy.deepcopy(next(o for o in s.owners if o["kind"] == "PodGang" and o["metadata"]["name"] == "llm-0"))
    base["spec"]["podgroups"][0]["minReplicas"] = 0
    apply_object(scheduler, base)
    changed = scheduler.membership.view("ml/podgang-llm-0")
    assert changed.spec is None
    assert changed.message == "PodGang ml/llm-0: spec.podgroups[0].minReplicas: expected an integer >= 1, got 0"


def test_the_simulator_uses_the_podgangs_given_over_the_ones_it_would_make(tmp_path: Path) -> None:
    # Grove's PodGang translated the domains through its ClusterTopologyBinding; the one given in
    # the input (here: a worker minimum of 1, not the template's 2) is the one grouped.
    from extender.simulate.loader import load
    from extender.simulate.runner import Simulation

    workload = pcs(sg_replicas=2)
    _, _, base = podgang_objects(workload)
    given = copy.deepcopy(base)
    given["spec"]["podgroups"][2]["minReplicas"] = 1
    path = tmp_path / "grove.yaml"
    path.write_text(yaml.safe_dump_all([workload, given]))
    sim = Simulation(load([str(path)]))
    view = sim.scheduler.membership.view("ml/podgang-llm-0")
    assert view.spec is not None
    assert {s.name: s.min_member for s in view.spec.subgroups}["llm-0-prefill-0-worker"] == 1


SYNTH_BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "scaling-group-names-an-unknown-clique",
        {"cliqueNames": ["leader", "decoder"]},
        "PodCliqueSet ml/llm: spec.template.podCliqueScalingGroups[0].cliqueNames: names decoder,"
        " which spec.template.cliques does not define",
    ),
    (
        "scaling-group-without-cliques",
        {"cliqueNames": []},
        "PodCliqueSet ml/llm: spec.template.podCliqueScalingGroups[0].cliqueNames: expected clique names, got []",
    ),
    (
        "min-available-above-replicas",
        {"replicas": 1, "minAvailable": 2},
        "PodCliqueSet ml/llm: spec.template.podCliqueScalingGroups[0].minAvailable: is 2, more than replicas 1",
    ),
]


@pytest.mark.parametrize(("change", "want"), [c[1:] for c in SYNTH_BAD], ids=[c[0] for c in SYNTH_BAD])
def test_a_podcliqueset_grove_would_refuse_is_not_synthesized(change: dict[str, Any], want: str) -> None:
    workload = pcs(replicas=2)
    workload["spec"]["template"]["podCliqueScalingGroups"][0].update(change)
    with pytest.raises(InvalidObject) as exc:
        synthesize(workload)
    assert [str(e) for e in exc.value.errors] == [want]


def test_pods_created_before_their_podgang_are_grouped_once_it_appears() -> None:
    workload = pcs(sg_replicas=2)
    s = synthesize(workload)
    scheduler = GangScheduler(ClusterState())
    podgangs = [o for o in s.owners if o["kind"] == "PodGang"]
    for body in (workload, *(o for o in s.owners if o["kind"] != "PodGang"), *s.pods):
        apply_object(scheduler, body)
    assert scheduler.membership.groups() == []
    assert scheduler.membership.waiting("ml/llm-0-frontend-0") == (
        "PodGang ml/llm-0 (its grove.io/podgang label) is not visible yet; it decides the PodGroup"
    )
    for body in podgangs:
        apply_object(scheduler, body)
    assert scheduler.membership.groups() == ["ml/podgang-llm-0"]
    view = scheduler.membership.view("ml/podgang-llm-0")
    assert view.spec is not None
    assert len(view.pods) == 9
    assert scheduler.membership.waiting("ml/llm-0-frontend-0") is None
