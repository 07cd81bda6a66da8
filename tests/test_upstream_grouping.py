"""scheduling.k8s.io PodGroup trees as gangs: the tree, topogang's annotations on the groups,
bad fields named like those of topogang's own objects, pods that wait, and regrouping."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.core.apply import apply_object, delete_object
from extender.core.cluster import ClusterState
from extender.core.scheduler import GangScheduler
from extender.grouping import ObjectIndex, group_pods
from extender.grouping.admission import admit
from extender.model.pod import PodInfo, parse_pod
from tests.grouping_builders import errors, members, render
from tests.test_upstream_gangs import BLOCK, RACK, ZONE, composite, group, job, pod

JSON = dict[str, Any]


def pods(*bodies: JSON) -> list[PodInfo]:
    return [parse_pod(b) for b in bodies]


def grouped(objects: list[JSON], ps: list[PodInfo]) -> Any:
    return group_pods(ps, ObjectIndex(objects), {})


def test_a_composite_tree_becomes_subgroups_with_counts_and_required_levels() -> None:
    objects = [composite("job", 1, [ZONE]), composite("half", 2, [BLOCK], parent="job")]
    objects += [group(f"g{i}", 2, [RACK], parent="half") for i in range(2)]
    ps = pods(*(pod(f"g{i}-{k}", group=f"g{i}") for i in range(2) for k in range(3)))
    result = grouped(objects, ps)
    g = result.groups["ml/compositepodgroup-job"]
    assert render(g) == [
        f"ml/compositepodgroup-job sub=1 required={ZONE}",
        f"  half sub=2 required={BLOCK}",
        f"    g0 min=2 required={RACK}",
        f"    g1 min=2 required={RACK}",
    ]
    assert members(g) == {"g0": ["g0-0", "g0-1", "g0-2"], "g1": ["g1-0", "g1-1", "g1-2"]}
    assert g.owner is not None
    assert (g.owner.kind, g.owner.name) == ("CompositePodGroup", "job")


def test_topogang_annotations_on_the_groups_add_preferred_levels_and_segments() -> None:
    root = group("train", 4, [BLOCK])
    root["metadata"]["annotations"] = {
        "kai.scheduler/topology": "default",
        "kai.scheduler/topology-preferred-placement": "rack",
        "kai.scheduler/segment-size": "2",
        "kai.scheduler/segment-topology-required-placement": RACK,
        "scheduling.topogang.io/on-unrepairable": "EvictGang",
    }
    bodies = [pod(f"w-{i}", group="train") for i in range(4)]
    for i, b in enumerate(bodies):
        b["metadata"]["labels"] = {"batch.kubernetes.io/job-completion-index": str(i)}
    g = grouped([root], pods(*bodies)).groups["ml/podgroup-train"]
    assert render(g) == [
        "ml/podgroup-train sub=1",
        f"  train sub=2 required={BLOCK} preferred=rack topology=default",
        f"    train-seg-0 min=2 required={RACK} topology=default",
        f"    train-seg-1 min=2 required={RACK} topology=default",
    ]
    assert members(g) == {"train-seg-0": ["w-0", "w-1"], "train-seg-1": ["w-2", "w-3"]}
    assert g.podgroup is not None
    assert g.podgroup.annotations["scheduling.topogang.io/on-unrepairable"] == "EvictGang"


def test_two_topology_entries_are_both_required() -> None:
    g = grouped([group("train", 2, [ZONE, RACK])], pods(pod("a", group="train"), pod("b", group="train")))
    spec = g.groups["ml/podgroup-train"].podgroup
    c = spec.subgroup_constraints["train"]
    assert (c.required, c.more_required) == (ZONE, (RACK,))
    # errors name the group that wrote them (c.obj) and the field there
    assert (c.obj, c.required_fields) == (
        "PodGroup ml/train",
        ("spec.schedulingConstraints.topology[0].key", "spec.schedulingConstraints.topology[1].key"),
    )


BAD: list[tuple[str, Any, list[str]]] = [
    (
        "misspelt-min-count",
        lambda b: b["spec"]["schedulingPolicy"].update(gang={"minCout": 2}),
        [
            "PodGroup ml/train: spec.schedulingPolicy.gang.minCout: unknown field; did you mean minCount?",
            "PodGroup ml/train: spec.schedulingPolicy.gang.minCount: expected an integer >= 1, got null",
        ],
    ),
    (
        "misspelt-spec-field",
        lambda b: b["spec"].update(schedulingConstraint={"topology": []}),
        ["PodGroup ml/train: spec.schedulingConstraint: unknown field; did you mean schedulingConstraints?"],
    ),
    (
        "both-policies",
        lambda b: b["spec"]["schedulingPolicy"].update(basic={}),
        ["PodGroup ml/train: spec.schedulingPolicy: expected exactly one of basic and gang, got basic, gang"],
    ),
    (
        "topology-key-typo",
        lambda b: b["spec"]["schedulingConstraints"].update(topology=[{"keys": RACK}]),
        [
            "PodGroup ml/train: spec.schedulingConstraints.topology[0].keys: unknown field; did you mean key?",
            "PodGroup ml/train: spec.schedulingConstraints.topology[0].key: expected a node label key, got null",
        ],
    ),
    (
        "zero-min-count",
        lambda b: b["spec"]["schedulingPolicy"]["gang"].update(minCount=0),
        ["PodGroup ml/train: spec.schedulingPolicy.gang.minCount: expected an integer >= 1, got 0"],
    ),
]


@pytest.mark.parametrize(("change", "want"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_a_bad_field_makes_the_gang_invalid_naming_it_and_the_others_go_on(change: Any, want: list[str]) -> None:
    bad = group("train", 2, [RACK])
    change(bad)
    result = grouped([bad, group("other", 1, [])], pods(pod("a", group="train"), pod("b", group="other")))
    assert errors(result.groups["ml/podgroup-train"]) == want
    assert result.groups["ml/podgroup-other"].podgroup is not None


def test_a_composite_asking_more_groups_than_it_has_and_a_cycle_are_named() -> None:
    objects = [composite("job", 3, []), group("g", 1, [], parent="job")]
    result = grouped(objects, pods(pod("a", group="g")))
    assert errors(result.groups["ml/compositepodgroup-job"]) == [
        "CompositePodGroup ml/job: spec.schedulingPolicy.gang.minGroupCount: is 3 but 1 group(s) name it"
        " as their parent"
    ]
    cycle = [composite("x", 1, [], parent="y"), composite("y", 1, [], parent="x"), group("g", 1, [], parent="x")]
    result = grouped(cycle, pods(pod("a", group="g")))
    assert [e for g in result.groups.values() for e in errors(g)] == [
        "CompositePodGroup ml/y: spec.parentCompositePodGroupName: names CompositePodGroup ml/x,"
        " which is below it: the groups form a cycle"
    ]


def test_pods_wait_for_their_podgroup_and_its_parent() -> None:
    result = grouped([], pods(pod("a", group="train")))
    assert result.waiting == {
        "ml/a": "PodGroup ml/train (scheduling.k8s.io, its spec.schedulingGroup) does not exist yet"
    }
    result = grouped([group("g", 1, [], parent="job")], pods(pod("a", group="g")))
    assert result.waiting == {"ml/a": "CompositePodGroup ml/job (parent of PodGroup ml/g) does not exist yet"}


def test_the_webhook_manages_upstream_gang_pods_even_before_their_podgroup() -> None:
    index = ObjectIndex([group("train", 2, [RACK])])
    assert admit(parse_pod(pod("a", group="train")), index, {}).managed
    assert admit(parse_pod(pod("b", group="missing")), ObjectIndex([]), {}).managed


def test_the_scheduler_regroups_when_groups_appear_and_change() -> None:
    scheduler = GangScheduler(ClusterState())
    for i in range(2):
        apply_object(scheduler, pod(f"g{i}-0", group=f"g{i}"))
    # the pods came first; then the leaves (naming a parent not there yet); then the root
    for i in range(2):
        apply_object(scheduler, group(f"g{i}", 1, [RACK], parent="job"))
    assert scheduler.membership.group_of("ml/g0-0") is None
    root = composite("job", 2, [ZONE])
    apply_object(scheduler, root)
    assert scheduler.membership.group_of("ml/g0-0") == "ml/compositepodgroup-job"
    assert scheduler.membership.group_of("ml/g1-0") == "ml/compositepodgroup-job"
    view = scheduler.membership.view("ml/compositepodgroup-job")
    assert view.spec is not None
    assert view.spec.min_subgroup == 2
    # a third group under the root, with no pods yet: the root's tree changes
    changed = copy.deepcopy(root)
    changed["spec"]["schedulingPolicy"]["gang"]["minGroupCount"] = 3
    apply_object(scheduler, group("g2", 1, [], parent="job"))
    apply_object(scheduler, changed)
    view = scheduler.membership.view("ml/compositepodgroup-job")
    assert view.spec is not None
    assert view.spec.min_subgroup == 3
    assert [s.name for s in view.spec.subgroups] == ["g0", "g1", "g2"]
    delete_object(scheduler, changed)
    assert scheduler.membership.group_of("ml/g0-0") is None


def test_a_job_with_spec_scheduling_bad_or_basic() -> None:
    body = job({"schedulingPolicy": {"gang": {"minCount": 9}}})
    from tests.grouping_builders import group as group_workloads

    result = group_workloads(body)
    assert errors(result.groups["ml/job-train"]) == [
        "Job ml/train: spec.scheduling.schedulingPolicy.gang.minCount: is 9 but the Job runs 4 pod(s) at once"
        " (parallelism)"
    ]
    basic = group_workloads(job({"schedulingPolicy": {"basic": {}}, "schedulingConstraint": {}}))
    assert errors(basic.groups["ml/job-train"]) == [
        "Job ml/train: spec.scheduling.schedulingConstraint: unknown field; did you mean schedulingConstraints?"
    ]
    basic = group_workloads(job({"schedulingPolicy": {"basic": {}}}))
    assert render(basic.groups["ml/job-train"]) == ["ml/job-train sub=1", "  job min=1"]


def test_a_member_another_decider_binds_elsewhere_is_a_split_in_status_and_an_event() -> None:
    from dataclasses import replace

    from extender.kube.podgroup_status import SPLIT_CONDITION, status_body, transition
    from tests.test_core_lifecycle import NODES, planned, setup

    scheduler, keys = setup()
    scheduler.filter(scheduler.state.pods[keys[0]], NODES, 0.0)
    plan = planned(scheduler)
    elsewhere = next(n for n in NODES if n not in plan.values())
    scheduler.observe_pod(replace(scheduler.state.pods[keys[0]], node_name=elsewhere))
    status = scheduler.status("default/g")
    assert status.split is not None
    said = (
        f"gang split between two deciders: pod default/g-0 was bound to node {elsewhere} by another scheduler,"
        f" not to its planned node {plan[keys[0]]}"
    )
    assert said in status.message
    body = status_body(status, None, "2026-01-01T00:00:00Z")
    split = next(c for c in body["conditions"] if c["type"] == SPLIT_CONDITION)
    assert (split["status"], split["reason"]) == ("True", "SplitBetweenDeciders")
    event = transition(None, status)
    assert event is not None
    assert event[:2] == ("Warning", "GangSplit")
    assert transition(body, status) is None  # said once
    # a member bound where it was planned is no split
    scheduler2, keys2 = setup()
    scheduler2.filter(scheduler2.state.pods[keys2[0]], NODES, 0.0)
    node = planned(scheduler2)[keys2[1]]
    scheduler2.observe_pod(replace(scheduler2.state.pods[keys2[1]], node_name=node))
    assert scheduler2.status("default/g").split is None


def test_the_repair_policy_on_the_root_group_counts_as_on_the_pods() -> None:
    from extender.core.repairing import unrepairable_policy

    assert unrepairable_policy([], {"scheduling.topogang.io/on-unrepairable": "EvictGang"}) == (True, "")
    assert unrepairable_policy([], {}) == (False, "")
    evict, note = unrepairable_policy([], {"scheduling.topogang.io/on-unrepairable": "Evict"})
    assert not evict
    assert note == "annotation scheduling.topogang.io/on-unrepairable: 'Evict' is not EvictGang or Keep; kept running"


def test_a_jobs_segment_annotations_reach_the_podgroup_its_controller_made_through_its_pods() -> None:
    # Kubernetes' Job controller copies spec.scheduling into a PodGroup, not the template's
    # annotations: those are on the pods, and count as the group's (whose own win).
    bodies = [pod(f"w-{i}", group="train-pg") for i in range(4)]
    for i, b in enumerate(bodies):
        b["metadata"]["labels"] = {"batch.kubernetes.io/job-completion-index": str(i)}
        b["metadata"]["annotations"] = {"kai.scheduler/segment-size": "2"}
    made = group("train-pg", 4, [BLOCK], annotations={"kai.scheduler/topology": "default"})
    g = grouped([made], pods(*bodies)).groups["ml/podgroup-train-pg"]
    assert render(g)[1:] == [
        f"  train-pg sub=2 required={BLOCK}",
        "    train-pg-seg-0 min=2",
        "    train-pg-seg-1 min=2",
    ]


def test_a_huge_min_count_is_one_invalid_gang_in_bounded_time() -> None:
    result = grouped([group("huge", 1_000_000_000, [RACK])], pods(pod("a", group="huge")))
    assert errors(result.groups["ml/podgroup-huge"])[0] == (
        "PodGroup ml/huge: spec.schedulingPolicy.gang.minCount: is 1,000,000,000;"
        " topogang's limit is 100,000 (the README lists the limits)"
    )


def test_the_webhook_gives_a_pod_beyond_the_minimum_its_segment() -> None:
    # one pod seen alone (the webhook): its index says how many pods its PodGroup has at least
    made = group("train", 2, [BLOCK])
    made["metadata"]["annotations"] = {
        "kai.scheduler/topology": "default",
        "kai.scheduler/segment-size": "2",
        "kai.scheduler/segment-topology-required-placement": RACK,
    }
    body = pod("w-5", group="train")
    body["metadata"]["labels"] = {"batch.kubernetes.io/job-completion-index": "5"}
    seen = admit(parse_pod(body), ObjectIndex([made]), {})
    assert seen.managed
    assert seen.segment is not None
    assert (seen.segment.segment, seen.segment.index_in_segment) == (2, 1)
