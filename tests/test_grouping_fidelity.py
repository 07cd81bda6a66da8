"""The seeds' annotation spellings as the grouper reads them: Kueue's TAS KEP's own Kueue names
(require-topology, prefer-topology, "auto") on a PodTemplate and on the workload, the LWS
subgroup-key label; each written rule ends in the PodGroup tree, and a bad level is reported on
every spelling naming the annotation.
"""

from __future__ import annotations

import pytest

from extender.placement import ClusterSnapshot, Plan, PlanResult, Unplaceable, build_gang, plan
from tests.builders import GPU, TOPO, grid, racks_of
from tests.grouping_builders import errors, group, job, jobset, lws, only, pods_of, render, template

REQUIRE, PREFER = "kueue.x-k8s.io/require-topology", "kueue.x-k8s.io/prefer-topology"
RACK = "example.com/topology-rack"
KAI_PREFERRED = "kai.scheduler/topology-preferred-placement"


@pytest.mark.parametrize(
    ("where", "annotation", "tree"),
    [
        ("template", REQUIRE, ["ml/job-batch sub=1", f"  job min=4 required={RACK}"]),
        ("template", PREFER, ["ml/job-batch sub=1", f"  job min=4 preferred={RACK}"]),
        ("workload", REQUIRE, [f"ml/job-batch sub=1 required={RACK}", "  job min=4"]),
        ("workload", PREFER, [f"ml/job-batch sub=1 preferred={RACK}", "  job min=4"]),
    ],
)
def test_seed_004_names_are_aliases_of_the_podset_names(where: str, annotation: str, tree: list[str]) -> None:
    ann = {annotation: RACK}
    w = job(ann=ann) if where == "template" else job(annotations=ann)
    assert render(only(group(w))) == tree


def test_two_spellings_that_disagree_are_an_error_naming_both() -> None:
    g = only(group(job(ann={"kueue.x-k8s.io/podset-required-topology": RACK, REQUIRE: "example.com/topology-block"})))
    assert errors(g) == [
        f"Job ml/batch: spec.template.metadata.annotations[{REQUIRE}]: 'example.com/topology-block' conflicts "
        f"with kueue.x-k8s.io/podset-required-topology={RACK!r}"
    ]


def test_prefer_auto_is_the_finest_level_of_the_topology() -> None:
    g = only(group(job(ann={PREFER: "auto"})))
    assert g.podgroup is not None
    built = build_gang(g.podgroup, [], {"default": TOPO}, subgroup_of=g.subgroup_of)
    assert built.gang is not None, built.errors
    (part,) = built.gang.root.children
    assert part.rule is not None
    assert part.rule.preferred == len(TOPO.levels)  # rack: placement climbs from there


@pytest.mark.parametrize("annotation", [REQUIRE, PREFER])
@pytest.mark.parametrize("where", ["template", "workload"])
def test_a_level_the_topology_does_not_list_is_an_error_on_every_spelling(annotation: str, where: str) -> None:
    ann = {annotation: "row"}
    w = job(ann=ann) if where == "template" else job(annotations=ann)
    g = only(group(w))
    assert g.podgroup is not None
    built = build_gang(g.podgroup, [], {"default": TOPO}, subgroup_of=g.subgroup_of)
    assert built.gang is None
    prefix = "spec.template.metadata" if where == "template" else "metadata"
    (error,) = [str(e) for e in built.errors]
    assert error.startswith(f"Job ml/batch: {prefix}.annotations[{annotation}]: 'row' is not a level")


def test_jobset_podset_annotations_constrain_each_job_and_kai_the_whole_jobset() -> None:
    w = jobset(
        [("workers", 2, 4)],
        ann={"workers": {"kueue.x-k8s.io/podset-required-topology": RACK, KAI_PREFERRED: "example.com/topology-zone"}},
        annotations={"kai.scheduler/topology-required-placement": "example.com/topology-block"},
    )
    assert render(only(group(w))) == [
        "ml/jobset-js sub=1 required=example.com/topology-block",
        "  workers sub=2 preferred=example.com/topology-zone",
        f"    workers-0 min=4 required={RACK}",
        f"    workers-1 min=4 required={RACK}",
    ]


def test_jobset_jobs_each_take_their_own_rack() -> None:
    # two Jobs of 4 pods x 4 GPUs, racks of two 8-GPU nodes: one rack cannot hold both Jobs
    w = jobset([("workers", 2, 4)], ann={"workers": {REQUIRE: RACK}})
    w["spec"]["replicatedJobs"][0]["template"]["spec"]["template"] = template(gpus=4)
    result = group(w)
    g = only(result)
    assert g.podgroup is not None
    pods, _ = pods_of(w)
    built = build_gang(g.podgroup, pods, {"default": TOPO}, order=g.order, subgroup_of=g.subgroup_of)
    assert built.gang is not None, built.errors
    got = plan(ClusterSnapshot.of(grid(racks=2, nodes=2)), built.gang)
    assert isinstance(got, Plan), got
    racks = {
        job: {racks_of(got.assignments)[k] for k, leaf in g.subgroup_of.items() if leaf == job}
        for job in ("workers-0", "workers-1")
    }
    assert all(len(r) == 1 for r in racks.values())
    assert racks["workers-0"] != racks["workers-1"]


def _lws_podset_group(gpus: int = 4) -> dict[str, object]:
    ann = {"kueue.x-k8s.io/podset-group-name": "llm", "kueue.x-k8s.io/podset-required-topology": RACK}
    return lws(1, 4, worker_ann=ann, leader=template(ann, gpus=gpus), worker_gpus=gpus)


def _place_lws(w: dict[str, object], used: dict[str, dict[str, int]]) -> tuple[PlanResult, dict[str, str]]:
    g = only(group(w))
    assert g.podgroup is not None, g.errors
    pods, _ = pods_of(w)
    built = build_gang(g.podgroup, pods, {"default": TOPO}, order=g.order, subgroup_of=g.subgroup_of)
    assert built.gang is not None, built.errors
    return plan(ClusterSnapshot.of(grid(racks=2, nodes=2), used), built.gang), dict(g.subgroup_of)


def test_podsets_sharing_a_group_name_are_one_set_in_one_domain() -> None:
    g = only(group(_lws_podset_group()))
    assert g.podgroup is not None
    (podset_group,) = g.podgroup.subgroup_sets
    assert podset_group.subgroups == ("leader", "workers")
    assert podset_group.constraint.required == RACK
    # each rack has room for 3 pods of 4 GPUs: the leader and its 3 workers fit no single rack
    used = {"z1-b1-r1-n1": {GPU: 4000}, "z1-b1-r2-n1": {GPU: 4000}}
    got, _ = _place_lws(_lws_podset_group(), used)
    assert isinstance(got, Unplaceable)
    assert got.message.startswith(
        "SubGroupSet [leader, workers]: 4 pods x {cpu: 1, nvidia.com/gpu: 4} in one rack; the best rack fits 3"
    )
    got, _ = _place_lws(_lws_podset_group(), {"z1-b1-r1-n1": {GPU: 4000}})
    assert isinstance(got, Plan)
    assert set(racks_of(got.assignments).values()) == {"z1-b1-r2"}
