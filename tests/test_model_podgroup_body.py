"""podgroup_spec_body is the inverse of parse_podgroup: every gang the grouper derives from the
workload examples, written as a PodGroup object and read back, is the same gang."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from extender.model.podgroup import PodGroupSpec, TopologyConstraint, parse_podgroup
from extender.model.podgroup_body import podgroup_spec_body
from tests.builders import podgroup
from tests.grouping_builders import group_file

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = sorted((ROOT / "examples" / "workloads").glob("*.yaml"))


def derived(path: Path) -> list[PodGroupSpec]:
    result, _ = group_file(path)
    return [g.podgroup for g in result.groups.values() if g.podgroup is not None]


def comparable(spec: PodGroupSpec) -> PodGroupSpec:
    """What the PodGroup API carries: not where a constraint was read from, nor exclusivity, nor
    which SubGroups are a workload's segments."""

    def plain(c: TopologyConstraint | None) -> TopologyConstraint | None:
        if c is None:
            return None
        return replace(c, field="", exclusive=False, required_fields=(), obj="", preferred_at="", topology_at="")

    return replace(
        spec,
        global_constraint=plain(spec.global_constraint),
        subgroup_constraints={k: plain(c) for k, c in spec.subgroup_constraints.items()},  # type: ignore[misc]
        subgroup_sets=tuple(replace(s, constraint=plain(s.constraint)) for s in spec.subgroup_sets),  # type: ignore[arg-type]
        subgroups=tuple(replace(sg, segment_pods=0) for sg in spec.subgroups),
        uid="",
        derived_from="",
    )


def round_trip(spec: PodGroupSpec) -> PodGroupSpec:
    body = {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": spec.name, "namespace": spec.namespace, "annotations": dict(spec.annotations)},
        "spec": podgroup_spec_body(spec),
    }
    return parse_podgroup(body)


@pytest.mark.parametrize("path", WORKLOADS, ids=[p.stem for p in WORKLOADS])
def test_every_derived_gang_reads_back_the_same(path: Path) -> None:
    specs = derived(path)
    assert specs, "the example forms at least one gang"
    for spec in specs:
        assert comparable(round_trip(spec)) == comparable(spec)


def test_every_field_of_a_written_podgroup_reads_back() -> None:
    spec = podgroup(
        {
            "minSubGroup": 1,
            "queue": "q",
            "priorityClassName": "high",
            "markUnschedulable": True,
            "schedulingBackoff": -1,
            "subGroups": [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 0}, {"name": "c", "parent": "a"}],
            "topologyConstraints": {
                "global": {"preferredTopologyLevel": "zone", "topology": "dc"},
                "subGroups": {"c": {"requiredTopologyLevel": "rack"}},
                "subGroupSets": [{"subGroups": ["a", "b"], "constraint": {"requiredTopologyLevel": "block"}}],
            },
        }
    )
    assert comparable(round_trip(spec)) == comparable(spec)
    assert podgroup_spec_body(podgroup({})) == {}
