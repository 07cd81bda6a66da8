"""The membership cache rebuilds a gang's view only when what the view reads of a member changed.

A nomination writes topogang's plan-generation annotation and status.nominatedNodeName on every
planned member, and kwok or the kubelet then moves each to Running: none of it changes the tree,
and rebuilding a 4,096-pod gang's view for each made every filter call of its members cost the
whole gang.
"""

from __future__ import annotations

from dataclasses import replace

from extender.core.scheduler import GangScheduler
from extender.model.pod import PLAN_GENERATION_ANNOTATION
from tests.test_core_lifecycle import setup


def test_the_plan_generation_annotation_or_a_phase_change_keeps_the_view_a_binding_rebuilds_it() -> None:
    scheduler, keys = setup()
    view = scheduler.membership.view("default/g")
    pod = scheduler.state.pods[keys[0]]
    scheduler.observe_pod(replace(pod, annotations={**pod.annotations, PLAN_GENERATION_ANNOTATION: "7"}))
    assert scheduler.membership.view("default/g") is view
    scheduler.observe_pod(replace(scheduler.state.pods[keys[1]], phase="Running"))
    assert scheduler.membership.view("default/g") is view
    scheduler.observe_pod(replace(scheduler.state.pods[keys[2]], node_name="z1-b1-r1-n1"))
    rebuilt = scheduler.membership.view("default/g")
    assert rebuilt is not view
    assert rebuilt.built is not None


def test_another_annotation_still_regroups_the_family() -> None:
    # Grouping reads annotations (pod-group-name, subgroup names): any other change is a regroup.
    scheduler: GangScheduler
    scheduler, keys = setup()
    view = scheduler.membership.view("default/g")
    pod = scheduler.state.pods[keys[0]]
    scheduler.observe_pod(replace(pod, annotations={**pod.annotations, "pod-group-name": "other"}))
    assert scheduler.membership.group_of(keys[0]) != "default/g"
    assert scheduler.membership.view("default/g") is not view
