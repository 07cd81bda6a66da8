"""A message is said once: identical errors and warnings of one gang once, and those that differ
only in the pod they name once, with how many more pods (named when few). In the gang's status,
`explain` and `simulate` alike, since they all read the same view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from extender.model.errors import FieldError, said_once, said_once_text
from tests.grouping_builders import kubeflow
from tests.test_upstream_gangs import podgroups, simulate, topogang_podgroup

POD_FIELD = "metadata.annotations[x]"


def pod_error(i: int, message: str = "bad") -> FieldError:
    return FieldError(f"Pod ml/w-{i}", POD_FIELD, message)


ERRORS: list[tuple[str, list[FieldError], list[str]]] = [
    (
        "identical",
        [FieldError("TFJob ml/t", "f", "m")] * 128,
        ["TFJob ml/t: f: m"],
    ),
    (
        "many-pods",
        [pod_error(i) for i in range(128)],
        [f"Pod ml/w-0: {POD_FIELD}: bad (and 127 more pods)"],
    ),
    (
        "few-pods-named",
        [pod_error(i) for i in range(3)],
        [f"Pod ml/w-0: {POD_FIELD}: bad (and 2 more pods: ml/w-1, ml/w-2)"],
    ),
    (
        "one-pod-twice",
        [pod_error(0), pod_error(0)],
        [f"Pod ml/w-0: {POD_FIELD}: bad"],
    ),
    (
        "different-messages-kept-in-order",
        [pod_error(0, "a"), FieldError("Job ml/j", "f", "m"), pod_error(1, "b"), pod_error(2, "a")],
        [
            f"Pod ml/w-0: {POD_FIELD}: a (and 1 more pod: ml/w-2)",
            "Job ml/j: f: m",
            f"Pod ml/w-1: {POD_FIELD}: b",
        ],
    ),
]


@pytest.mark.parametrize(("errors", "said"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_errors_are_said_once(errors: list[FieldError], said: list[str]) -> None:
    assert [str(e) for e in said_once(errors)] == said
    assert list(said_once_text(str(e) for e in errors)) == said


def test_a_typo_in_the_template_of_256_workers_is_said_once_in_the_status(tmp_path: Path) -> None:
    ann = {"kai.scheduler/segment-size": "2", "kai.scheduler/segment-topology-required-placement": "Rack"}
    tfjob = kubeflow("TFJob", {"Worker": (256, ann)}, name="t", annotations={"kai.scheduler/topology": "default"})
    status = podgroups(simulate(tmp_path, [tfjob]))["ml/tfjob-t"]
    assert status.phase == "Invalid"
    assert status.message == (
        "TFJob ml/t: spec.tfReplicaSpecs.Worker.template.metadata.annotations"
        "[kai.scheduler/segment-topology-required-placement]: 'Rack' is not a level of Topology default;"
        " did you mean rack?"
    )


def pods_with(annotations: dict[str, str], n: int) -> list[dict[str, Any]]:
    container = {"name": "c", "resources": {"requests": {"cpu": "1"}}}
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"w-{i}", "namespace": "ml", "annotations": {"pod-group-name": "pg", **annotations}},
            "spec": {"containers": [container]},
        }
        for i in range(n)
    ]


def test_a_bad_runtime_bound_on_every_pod_is_warned_about_once(tmp_path: Path) -> None:
    objects = [
        topogang_podgroup("pg", {"minMember": 128}),
        *pods_with({"scheduling.topogang.io/runtime-bound": "soon"}, 128),
    ]
    status = podgroups(simulate(tmp_path, objects))["ml/pg"]
    assert status.phase == "Scheduled"
    assert status.warnings == (
        "Pod ml/w-0: metadata.annotations[scheduling.topogang.io/runtime-bound]: 'soon': expected a positive"
        " duration such as 90m, 2h30m or 3600 (seconds) (and 127 more pods)",
    )


def test_an_unknown_key_on_every_pod_is_warned_about_once(tmp_path: Path) -> None:
    objects = [topogang_podgroup("pg", {"minMember": 64}), *pods_with({"kai.scheduler/colour": "blue"}, 64)]
    status = podgroups(simulate(tmp_path, objects))["ml/pg"]
    assert status.phase == "Scheduled"
    assert status.warnings == (
        "Pod ml/w-0: metadata.annotations[kai.scheduler/colour] ignored: not an annotation KAI-Scheduler defines"
        " or topogang reads (and 63 more pods)",
    )
