"""GroupStatus -> PodGroup status body, condition transitions and Events, derived PodGroup objects."""

from __future__ import annotations

from typing import Any

import pytest

from extender.core.decisions import INVALID, PENDING, SCHEDULED
from extender.core.membership import GroupView
from extender.core.standing import GroupStatus, SubGroupStatus
from extender.kube.podgroup_status import derived_object, status_body, transition
from extender.model.pod import OwnerRef
from extender.placement import DomainRef
from tests.builders import podgroup

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"

SEGMENTS = (
    SubGroupStatus("worker", 2, 8, 8, 8),
    SubGroupStatus("worker-seg-0", 4, 4, 4, 4, DomainRef("rack", "z1/b1/r1")),
    SubGroupStatus("worker-seg-1", 4, 4, 4, 4, DomainRef("rack", "z1/b1/r2")),
)
DOMAINS = {
    "ml/tfjob-train": DomainRef("zone", "z1"),
    "worker-seg-0": DomainRef("rack", "z1/b1/r1"),
    "worker-seg-1": DomainRef("rack", "z1/b1/r2"),
}


def status(phase: str, reason: str, message: str = "m", **kw: Any) -> GroupStatus:
    return GroupStatus("ml/tfjob-train", phase, message, reason=reason, **kw)


def conditions(body: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {c["type"]: (c["status"], c["reason"], c["lastTransitionTime"]) for c in body["conditions"]}


def test_a_scheduled_gang_with_its_counts_and_domains() -> None:
    body = status_body(
        status(
            SCHEDULED, "Scheduled", "8 pod(s) bound", pods=8, planned=8, bound=8, subgroups=SEGMENTS, domains=DOMAINS
        ),
        None,
        T0,
        generation=3,
    )
    assert body == {
        "phase": "Scheduled",
        "message": "8 pod(s) bound",
        "observedGeneration": 3,
        "pods": 8,
        "planned": 8,
        "bound": 8,
        "domains": {"PodGroup": "zone z1", "worker-seg-0": "rack z1/b1/r1", "worker-seg-1": "rack z1/b1/r2"},
        "subGroups": [
            {"name": "worker", "minMember": 2, "pods": 8, "planned": 8, "bound": 8},
            {"name": "worker-seg-0", "minMember": 4, "pods": 4, "planned": 4, "bound": 4, "domain": "rack z1/b1/r1"},
            {"name": "worker-seg-1", "minMember": 4, "pods": 4, "planned": 4, "bound": 4, "domain": "rack z1/b1/r2"},
        ],
        "conditions": [
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "Scheduled",
                "message": "8 pod(s) bound",
                "lastTransitionTime": T0,
                "observedGeneration": 3,
            },
            {
                "type": "Unschedulable",
                "status": "False",
                "reason": "Scheduled",
                "message": "8 pod(s) bound",
                "lastTransitionTime": T0,
                "observedGeneration": 3,
            },
        ],
    }


@pytest.mark.parametrize(
    ("phase", "reason", "want"),
    [
        (
            PENDING,
            "GangIncomplete",
            {"Scheduled": ("False", "GangIncomplete"), "Unschedulable": ("True", "GangIncomplete")},
        ),
        (PENDING, "NoDomain", {"Scheduled": ("False", "NoDomain"), "Unschedulable": ("True", "NoDomain")}),
        (PENDING, "BindTimeout", {"Scheduled": ("False", "BindTimeout"), "Unschedulable": ("True", "BindTimeout")}),
        (PENDING, "Planned", {"Scheduled": ("False", "Planned"), "Unschedulable": ("False", "Planned")}),
        (PENDING, "Waiting", {"Scheduled": ("False", "Waiting"), "Unschedulable": ("False", "Waiting")}),
        (INVALID, "Invalid", {"Scheduled": ("False", "Invalid"), "Unschedulable": ("True", "Invalid")}),
    ],
    ids=["incomplete", "no-domain", "bind-timeout", "planned", "waiting", "invalid"],
)
def test_conditions_carry_the_reason_as_data(phase: str, reason: str, want: dict[str, tuple[str, str]]) -> None:
    body = status_body(status(phase, reason), None, T0)
    assert {k: v[:2] for k, v in conditions(body).items()} == want
    assert "observedGeneration" not in body  # unknown generation: not claimed


def test_transition_times_move_only_when_a_condition_flips() -> None:
    first = status_body(status(PENDING, "GangIncomplete", "gang 3/4 pods present"), None, T0)
    later = status_body(status(PENDING, "NoCapacity", "only 3 fit"), first, T1)
    assert conditions(later) == {
        "Scheduled": ("False", "NoCapacity", T0),
        "Unschedulable": ("True", "NoCapacity", T0),
    }
    planned = status_body(status(PENDING, "Planned"), later, T1)
    assert conditions(planned) == {"Scheduled": ("False", "Planned", T0), "Unschedulable": ("False", "Planned", T1)}
    # Nothing changed: the same body, so nothing is written.
    assert status_body(status(PENDING, "Planned"), planned, "2026-01-01T00:02:00Z") == planned


def test_a_scheduled_gang_keeps_the_domains_recorded_when_the_core_no_longer_knows_them() -> None:
    placed = status(SCHEDULED, "Scheduled", pods=8, bound=8, subgroups=SEGMENTS, domains=DOMAINS)
    before = status_body(placed, None, T0)
    bare = tuple(SubGroupStatus(s.name, s.min_member, s.pods, s.planned, s.bound) for s in SEGMENTS)
    after = status_body(status(SCHEDULED, "Scheduled", pods=8, bound=8, subgroups=bare), before, T1)
    assert after == before


@pytest.mark.parametrize(
    ("before", "now", "want"),
    [
        (None, (PENDING, "GangIncomplete", "gang 1/4"), None),  # the writer warns after a grace
        ((SCHEDULED, "Scheduled", "4 bound"), ("Finished", "Finished", "done"), ("Normal", "Finished", "done")),
        ((PENDING, "GangIncomplete", "gang 1/4"), (PENDING, "GangIncomplete", "gang 2/4"), None),
        (
            (PENDING, "GangIncomplete", "gang 3/4"),
            (PENDING, "NoDomain", "no rack"),
            ("Warning", "Unschedulable", "no rack"),
        ),
        ((PENDING, "NoDomain", "no rack"), (PENDING, "Planned", "planned"), None),
        ((PENDING, "Planned", "planned"), (SCHEDULED, "Scheduled", "4 bound"), ("Normal", "Scheduled", "4 bound")),
        ((SCHEDULED, "Scheduled", "4 bound"), (SCHEDULED, "Scheduled", "5 bound"), None),
        ((PENDING, "Planned", "planned"), (PENDING, "BindTimeout", "gate"), ("Warning", "Unschedulable", "gate")),
        (None, (INVALID, "Invalid", "bad level"), ("Warning", "Unschedulable", "bad level")),
        (None, (PENDING, "Waiting", "waiting"), None),
    ],
    ids=[
        "first-seen-incomplete",
        "finished",
        "more-pods",
        "now-no-domain",
        "planned",
        "scheduled",
        "still-scheduled",
        "gate-timeout",
        "invalid",
        "waiting",
    ],
)
def test_events_on_a_change_of_phase_or_of_why_it_cannot_run(
    before: tuple[str, str, str] | None, now: tuple[str, str, str], want: tuple[str, str, str] | None
) -> None:
    previous = status_body(status(*before[:2], before[2]), None, T0) if before else None
    assert transition(previous, status(now[0], now[1], now[2])) == want


def test_a_derived_gang_becomes_a_podgroup_owned_by_its_workload() -> None:
    spec = podgroup({"minMember": 2}, name="tfjob-train", namespace="ml", annotations={"kai.scheduler/topology": "dc"})
    owner = OwnerRef("kubeflow.org/v1", "TFJob", "train", "uid-1", True)
    view = GroupView("ml/tfjob-train", spec, None, owner=owner)
    assert derived_object(view, "ml", "tfjob-train") == {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": "tfjob-train",
            "namespace": "ml",
            "labels": {"app.kubernetes.io/managed-by": "topogang"},
            "annotations": {"kai.scheduler/topology": "dc"},
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "TFJob",
                    "name": "train",
                    "uid": "uid-1",
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": {"minMember": 2},
    }
    invalid = GroupView("ml/tfjob-train", None, None, owner=owner)
    assert "spec" not in (derived_object(invalid, "ml", "tfjob-train") or {})
    assert derived_object(GroupView("ml/pg", spec, None), "ml", "pg") is None  # a PodGroup object already
