"""The seeds' annotation spellings as the grouper reads them: seed 004's own Kueue names
(require-topology, prefer-topology, "auto") on a PodTemplate and on the workload, the LWS
subgroup-key label; each written rule ends in the PodGroup tree, and a bad level is reported on
every spelling naming the annotation.
"""

from __future__ import annotations

import pytest

from extender.placement import build_gang
from tests.builders import TOPO
from tests.grouping_builders import errors, group, job, only, render

REQUIRE, PREFER = "kueue.x-k8s.io/require-topology", "kueue.x-k8s.io/prefer-topology"
RACK = "example.com/topology-rack"


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
