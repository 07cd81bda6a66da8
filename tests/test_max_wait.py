"""scheduling.topogang.io/max-wait: read strictly from a PodGroup, a workload and the root of a
scheduling.k8s.io group tree; a bad value makes the gang Invalid naming the annotation."""

from __future__ import annotations

import pytest

from extender.model.errors import InvalidObject
from extender.model.max_wait import MAX_WAIT_ANNOTATION
from extender.model.podgroup import parse_podgroup
from tests.grouping_builders import errors, group, job, only
from tests.test_upstream_gangs import group as upstream_group
from tests.test_upstream_gangs import pod
from tests.test_upstream_grouping import grouped, pods

FIELD = f"metadata.annotations[{MAX_WAIT_ANNOTATION}]"


def podgroup(value: str) -> dict[str, object]:
    meta = {"name": "pg", "namespace": "ml", "annotations": {MAX_WAIT_ANNOTATION: value}}
    return {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "PodGroup", "metadata": meta, "spec": {}}


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800.0), ("2h", 7200.0), ("90s", 90.0), ("1h30m", 5400.0)])
def test_a_duration_with_units_is_read(text: str, seconds: float) -> None:
    assert parse_podgroup(podgroup(text)).max_wait == seconds


UNITS = "a positive duration with units, such as 30m, 2h, 90s or 1h30m"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3600", UNITS),  # which unit? refused, not guessed
        ("0s", UNITS),
        ("-5m", UNITS),
        ("soon", UNITS),
        ("30 min", UNITS),
        ("9000h", "at most 8784h (a year)"),
    ],
)
def test_a_bad_value_is_refused_naming_the_annotation(text: str, expected: str) -> None:
    with pytest.raises(InvalidObject) as raised:
        parse_podgroup(podgroup(text))
    assert [str(e) for e in raised.value.errors] == [f"PodGroup ml/pg: {FIELD}: '{text}': expected {expected}"]


def test_a_misspelt_key_asks_for_the_one_meant() -> None:
    meta = {"name": "pg", "namespace": "ml", "annotations": {"scheduling.topogang.io/max-wiat": "30m"}}
    with pytest.raises(InvalidObject) as raised:
        parse_podgroup({"kind": "PodGroup", "metadata": meta, "spec": {}})
    assert "unknown annotation; did you mean scheduling.topogang.io/max-wait?" in str(raised.value)


def test_on_a_workload_it_is_the_gangs_and_a_bad_value_names_the_workload() -> None:
    g = only(group(job(2, annotations={MAX_WAIT_ANNOTATION: "45m"})))
    assert g.podgroup is not None
    assert g.podgroup.max_wait == 2700.0
    bad = only(group(job(2, annotations={MAX_WAIT_ANNOTATION: "45"})))
    assert bad.podgroup is None
    assert errors(bad) == [f"Job ml/batch: {FIELD}: '45': expected {UNITS}"]


def test_on_the_root_of_a_scheduling_k8s_io_tree_it_is_the_gangs() -> None:
    root = upstream_group("train", 2, [], annotations={MAX_WAIT_ANNOTATION: "2h"})
    g = grouped([root], pods(pod("a", group="train"), pod("b", group="train"))).groups["ml/podgroup-train"]
    assert g.podgroup is not None
    assert g.podgroup.max_wait == 7200.0
