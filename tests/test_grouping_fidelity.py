"""The seeds' annotation spellings as the grouper reads them: seed 004's own Kueue names
(require-topology, prefer-topology, "auto") on a PodTemplate and on the workload, the LWS
subgroup-key label; each written rule ends in the PodGroup tree, and a bad level is reported on
every spelling naming the annotation.
"""

from __future__ import annotations

import pytest

from extender.placement import ClusterSnapshot, Plan, build_gang, plan
from tests.builders import TOPO, grid, racks_of
from tests.grouping_builders import errors, group, job, jobset, only, pods_of, render, template

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
    key = "requiredTopologyLevel" if annotation == REQUIRE else "preferredTopologyLevel"
    (error,) = {str(e) for e in built.errors}
    assert error.startswith(f"PodGroup ml/job-batch: {prefix}.annotations[{annotation}].{key}: 'row' is not a level")


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
