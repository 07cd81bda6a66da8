"""Kueue's PodSet annotations read as Kueue v0.19.2 reads them (its jobframework's TAS request
builder and validation): the unconstrained annotation takes every boolean spelling Go's
strconv.ParseBool takes, and the layers of podset-slice-required-topology-constraints name
different levels; a field a layer does not have is said, not dropped without a word."""

from __future__ import annotations

import pytest

from extender.model import annotation_keys as keys
from tests.grouping_builders import errors, group, job, only, render

JOB = "Job ml/batch: spec.template.metadata.annotations"
LAYERS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"

# The PodSet annotations of Kueue v0.19.2's apis/kueue/v1beta2/topology_types.go: each is one
# topogang reads.
PODSET_ANNOTATIONS = {
    "kueue.x-k8s.io/podset-required-topology",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kueue.x-k8s.io/podset-unconstrained-topology",
    "kueue.x-k8s.io/podset-slice-required-topology",
    "kueue.x-k8s.io/podset-slice-size",
    "kueue.x-k8s.io/podset-slice-required-topology-constraints",
    "kueue.x-k8s.io/podset-group-name",
}


def test_every_podset_annotation_kueue_defines_is_one_topogang_reads() -> None:
    assert PODSET_ANNOTATIONS <= keys.READ
    assert PODSET_ANNOTATIONS <= keys.KUEUE


@pytest.mark.parametrize("value", ["true", "True", "TRUE", "t", "T", "1", "false", "False", "FALSE", "f", "F", "0"])
def test_unconstrained_takes_every_boolean_spelling_kueue_takes(value: str) -> None:
    g = only(group(job(8, 8, ann={UNCONSTRAINED: value})))
    assert errors(g) == []
    assert render(g) == ["ml/job-batch sub=1", "  job min=8"]  # no level: placed whole, anywhere


@pytest.mark.parametrize("value", ["yes", "on", "", " true", "tRUE"])
def test_unconstrained_refuses_what_kueue_refuses(value: str) -> None:
    g = only(group(job(8, 8, ann={UNCONSTRAINED: value})))
    assert g.podgroup is None
    assert errors(g) == [
        f"{JOB}[{UNCONSTRAINED}]: expected a boolean as Kueue reads one"
        f" (true, false, 1, 0, t, f, True, FALSE...), got {value!r}"
    ]


def test_unconstrained_in_any_spelling_still_excludes_a_required_level() -> None:
    g = only(group(job(8, 8, ann={UNCONSTRAINED: "True", "kueue.x-k8s.io/podset-required-topology": "rack"})))
    assert errors(g) == [
        f"{JOB}[{UNCONSTRAINED}]: set only one of kueue.x-k8s.io/podset-required-topology, {UNCONSTRAINED}"
    ]


def test_two_layers_naming_one_level_are_refused() -> None:
    layers = '[{"topology": "block", "size": 8}, {"topology": "rack", "size": 4}, {"topology": "rack", "size": 2}]'
    g = only(group(job(8, 8, ann={LAYERS: layers})))
    assert g.podgroup is None
    assert errors(g) == [
        f"{JOB}[{LAYERS}][2].topology: 'rack' is layer 1's topology too: each layer names a different level"
    ]


def test_a_field_a_layer_does_not_have_is_said_and_the_layers_are_honoured() -> None:
    layers = '[{"topology": "block", "size": 4, "required": true}, {"topology": "rack", "size": 2, "sise": 1}]'
    g = only(group(job(8, 8, ann={LAYERS: layers})))
    assert errors(g) == []
    assert list(g.warnings) == [
        f"{JOB}[{LAYERS}][0].required ignored: a layer has only topology and size",
        f"{JOB}[{LAYERS}][1].sise ignored: a layer has only topology and size",
    ]
    assert render(g)[:4] == [
        "ml/job-batch sub=1",
        "  job sub=2",
        "    job-slice-0 sub=2 required=block",
        "      job-slice-0-0 min=2 required=rack",
    ]
