"""PodGroup parsing and validation: every bad input names the object, the field and what was expected."""

from __future__ import annotations

from typing import Any

import pytest

from extender.model.errors import InvalidObject
from extender.model.podgroup import parse_podgroup
from tests.builders import decode_prefill_spec


def parse(spec: dict[str, Any], api: str = "scheduling.topogang.io/v1alpha1") -> Any:
    return parse_podgroup({"apiVersion": api, "metadata": {"name": "pg", "namespace": "ml"}, "spec": spec})


def errors_of(spec: dict[str, Any], api: str = "scheduling.topogang.io/v1alpha1") -> list[str]:
    with pytest.raises(InvalidObject) as exc:
        parse(spec, api)
    return [str(e) for e in exc.value.errors]


def test_seed_example_2_parses() -> None:
    pg = parse(decode_prefill_spec())
    assert pg.key == "ml/pg"
    assert [sg.name for sg in pg.children_of("decode")] == ["decode-workers", "decode-leaders"]
    assert pg.subgroup_constraints["decode-workers"].required == "rack"
    assert pg.subgroup_sets[0].subgroups == ("decode-workers", "decode-leaders")
    assert pg.subgroup_sets[0].constraint.field == "spec.topologyConstraints.subGroupSets[0].constraint"


def test_all_seed_fields_are_read() -> None:
    pg = parse(
        {
            "minMember": 1,
            "queue": "team-a",
            "priorityClassName": "high",
            "markUnschedulable": True,
            "schedulingBackoff": 1,
            "topologyConstraints": {"global": {"preferredTopologyLevel": "rack", "topology": "dc"}},
        }
    )
    assert (pg.queue, pg.priority_class_name, pg.mark_unschedulable, pg.scheduling_backoff) == (
        "team-a",
        "high",
        True,
        1,
    )
    assert pg.global_constraint is not None
    assert (pg.global_constraint.preferred, pg.global_constraint.topology) == ("rack", "dc")


def test_run_ai_v2alpha2_with_min_subgroup_and_inline_constraint() -> None:
    pg = parse(
        {
            "minSubGroup": 1,
            "topologyConstraint": {"requiredTopologyLevel": "zone"},
            "subGroups": [
                {"name": "a", "minMember": 2, "topologyConstraint": {"requiredTopologyLevel": "rack"}},
                {"name": "b", "minMember": 2},
            ],
        },
        api="scheduling.run.ai/v2alpha2",
    )
    assert pg.min_subgroup == 1
    assert pg.global_constraint is not None
    assert pg.global_constraint.required == "zone"
    assert pg.subgroup_constraints["a"].required == "rack"


BAD = [
    pytest.param(
        {"subGroups": [{"name": "a", "minMember": 1}, {"name": "a", "minMember": 1}]},
        ["PodGroup ml/pg: spec.subGroups[1].name: 'a' is already spec.subGroups[0]"],
        id="duplicate-name",
    ),
    pytest.param(
        {"subGroups": [{"name": "a", "parent": "x", "minMember": 1}]},
        ["PodGroup ml/pg: spec.subGroups[0].parent: names SubGroup 'x', which does not exist (have: a)"],
        id="unknown-parent",
    ),
    pytest.param(
        {"subGroups": [{"name": "a", "parent": "b"}, {"name": "b", "parent": "a"}]},
        ["PodGroup ml/pg: spec.subGroups[0].parent: SubGroups form a cycle: a -> b -> a"],
        id="cycle",
    ),
    pytest.param(
        {"minMember": -1},
        ["PodGroup ml/pg: spec.minMember: expected an integer >= 0, got -1"],
        id="negative-min",
    ),
    pytest.param(
        {"minMember": "two"},
        ["PodGroup ml/pg: spec.minMember: expected an integer, got 'two'"],
        id="min-not-integer",
    ),
    pytest.param(
        {"minMember": 3, "subGroups": [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 1}]},
        ["PodGroup ml/pg: spec.minMember: is 3 but this level has only 2 child SubGroup(s)"],
        id="min-larger-than-children",
    ),
    pytest.param(
        {"subGroups": [{"name": "a", "minMember": 3}, {"name": "a1", "parent": "a", "minMember": 1}]},
        ["PodGroup ml/pg: spec.subGroups[0].minMember: is 3 but this level has only 1 child SubGroup(s)"],
        id="subgroup-min-larger-than-children",
    ),
    pytest.param(
        {"minMember": 1, "minSubGroup": 1, "subGroups": [{"name": "a", "minMember": 1}]},
        ["PodGroup ml/pg: spec.minSubGroup: set either minMember or minSubGroup on one level, not both"],
        id="min-and-minsubgroup",
    ),
    pytest.param(
        {"subGroups": [{"name": "a", "minSubGroup": 1}]},
        [
            "PodGroup ml/pg: spec.subGroups[0].minSubGroup: "
            "counts child SubGroups, but this level has none; use minMember"
        ],
        id="minsubgroup-on-leaf",
    ),
    pytest.param(
        {
            "subGroups": [{"name": "a", "minMember": 1}],
            "topologyConstraints": {"subGroups": {"b": {"requiredTopologyLevel": "rack"}}},
        },
        ["PodGroup ml/pg: spec.topologyConstraints.subGroups.b: names SubGroup 'b', which does not exist (have: a)"],
        id="constraint-unknown-subgroup",
    ),
    pytest.param(
        {
            "subGroups": [{"name": "a", "minMember": 1}],
            "topologyConstraints": {
                "subGroupSets": [{"subGroups": ["a", "zz"], "constraint": {"requiredTopologyLevel": "rack"}}]
            },
        },
        [
            "PodGroup ml/pg: spec.topologyConstraints.subGroupSets[0].subGroups: "
            "names SubGroup 'zz', which does not exist (have: a)"
        ],
        id="set-unknown-subgroup",
    ),
    pytest.param(
        {
            "subGroups": [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 1}],
            "topologyConstraints": {
                "subGroupSets": [
                    {"subGroups": ["a", "b"], "constraint": {"requiredTopologyLevel": "rack"}},
                    {"subGroups": ["b"], "constraint": {"requiredTopologyLevel": "zone"}},
                ]
            },
        },
        [
            "PodGroup ml/pg: spec.topologyConstraints.subGroupSets[1].subGroups: "
            "SubGroup 'b' is already in subGroupSets[0]; a SubGroup belongs to one set"
        ],
        id="subgroup-in-two-sets",
    ),
    pytest.param(
        {
            "subGroups": [
                {"name": "p", "minMember": 1},
                {"name": "a", "parent": "p", "minMember": 1},
                {"name": "b", "minMember": 1},
            ],
            "topologyConstraints": {
                "subGroupSets": [{"subGroups": ["a", "b"], "constraint": {"requiredTopologyLevel": "rack"}}]
            },
        },
        [
            "PodGroup ml/pg: spec.topologyConstraints.subGroupSets[0].subGroups: "
            "the SubGroups of one set must share a parent; these have parents (the PodGroup), p"
        ],
        id="set-across-parents",
    ),
    pytest.param(
        {"topologyConstraints": {"global": {"requiredTopologyLevel": 7}}},
        ["PodGroup ml/pg: spec.topologyConstraints.global.requiredTopologyLevel: expected a string, got 7"],
        id="level-not-string",
    ),
    pytest.param(
        {"subGroups": "a,b"},
        ["PodGroup ml/pg: spec.subGroups: expected a list, got a string"],
        id="subgroups-not-list",
    ),
    pytest.param(
        {"subGroups": [{"minMember": 1}]},
        ["PodGroup ml/pg: spec.subGroups[0].name: expected a non-empty SubGroup name"],
        id="subgroup-without-name",
    ),
]


@pytest.mark.parametrize(("spec", "want"), BAD)
def test_bad_podgroups_name_the_field(spec: dict[str, Any], want: list[str]) -> None:
    assert errors_of(spec) == want


def test_every_error_is_reported_at_once() -> None:
    errors = errors_of({"minMember": -2, "subGroups": [{"name": "a", "parent": "nope", "minMember": -1}]})
    assert len(errors) == 3
