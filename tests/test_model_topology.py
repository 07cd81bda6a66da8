"""Topology parsing and level names: full label, alias, short name, node/hostname."""

from __future__ import annotations

import pytest

from extender.model.errors import InvalidObject
from extender.model.topology import LevelError, parse_topology

DC = parse_topology(
    {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "metadata": {"name": "dc"},
        "spec": {
            "levels": [
                {"nodeLabel": "example.com/topology-zone"},
                {"nodeLabel": "example.com/topology-block", "alias": "superpod"},
                {"nodeLabel": "example.com/topology-rack"},
            ]
        },
    }
)


@pytest.mark.parametrize(
    ("name", "level"),
    [
        ("example.com/topology-zone", 0),
        ("zone", 0),
        ("superpod", 1),
        ("block", 1),
        ("rack", 2),
        ("node", 3),
        ("hostname", 3),
        ("kubernetes.io/hostname", 3),
    ],
)
def test_level_names(name: str, level: int) -> None:
    assert DC.resolve(name) == level


def test_unknown_level_lists_valid_names() -> None:
    with pytest.raises(LevelError) as exc:
        DC.resolve("row")
    assert str(exc.value) == (
        "'row' is not a level of Topology dc (valid: block, example.com/topology-block, example.com/topology-rack, "
        "example.com/topology-zone, hostname, kubernetes.io/hostname, node, rack, superpod, zone)"
    )


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("Rack", "rack"),
        ("RACK", "rack"),
        ("Node", "node"),
        ("SuperPod", "superpod"),
        ("Example.com/Topology-Zone", "example.com/topology-zone"),
        ("rak", "rack"),
        ("superpods", "superpod"),
    ],
)
def test_a_level_written_in_another_case_or_misspelt_says_did_you_mean(name: str, meant: str) -> None:
    with pytest.raises(LevelError) as exc:
        DC.resolve(name)
    assert str(exc.value) == f"{name!r} is not a level of Topology dc; did you mean {meant}?"


def test_ambiguous_short_name_is_an_error() -> None:
    topo = parse_topology(
        {
            "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": "a.example/topology-rack"}, {"nodeLabel": "b.example/rack"}]},
        }
    )
    with pytest.raises(LevelError, match=r"'rack' is ambiguous in Topology t: it names a.example/topology-rack"):
        topo.resolve("rack")
    assert topo.resolve("b.example/rack") == 1


def test_hostname_level_is_implied_and_kept_last() -> None:
    assert DC.levels[-1].node_label == "kubernetes.io/hostname"
    listed = parse_topology(
        {"metadata": {"name": "k"}, "spec": {"levels": [{"nodeLabel": "r"}, {"nodeLabel": "kubernetes.io/hostname"}]}}
    )
    assert [lv.node_label for lv in listed.levels] == ["r", "kubernetes.io/hostname"]


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ({}, "Topology t: spec.levels: expected at least one level, e.g. [{nodeLabel: example.com/topology-rack}]"),
        ({"levels": [{"alias": "x"}]}, "Topology t: spec.levels[0].nodeLabel: expected a node label name"),
        (
            {"levels": [{"nodeLabel": "a"}, {"nodeLabel": "a"}]},
            "Topology t: spec.levels[1].nodeLabel: a is already level 0",
        ),
        (
            {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "r"}]},
            "Topology t: spec.levels[0].nodeLabel: kubernetes.io/hostname must be the last (finest) level",
        ),
        ({"levels": "zone,rack"}, "Topology t: spec.levels: expected a list, got a string"),
    ],
)
def test_bad_topologies(spec: dict[str, object], want: str) -> None:
    with pytest.raises(InvalidObject) as exc:
        parse_topology({"metadata": {"name": "t"}, "spec": spec})
    assert str(exc.value.errors[0]).startswith(want)
