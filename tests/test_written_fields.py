"""What is wrong with a derived gang's levels or Topology is said where the user wrote it (the
workload or template annotation, the group object's field, a ResourceInterface's path), once, and
never as a field of the PodGroup topogang built from it (`....requiredTopologyLevel`)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.grouping import ObjectIndex, group_pods
from extender.model.pod import parse_pod
from extender.model.topology import TopologySpec
from extender.placement import build_gang
from tests.builders import TOPO
from tests.grouping_builders import group, job, jobset, kubeflow, lws, pods_of, raycluster
from tests.test_grouping_grove import pcs
from tests.test_upstream_gangs import group as upstream_group
from tests.test_upstream_gangs import pod

OTHER = TopologySpec("other", TOPO.levels)
KAI_TOPOLOGY = "kai.scheduler/topology"
ON = {KAI_TOPOLOGY: "default"}  # KAI's segments need a Topology named
REQUIRED = "kai.scheduler/topology-required-placement"
PREFERRED = "kai.scheduler/topology-preferred-placement"
SEG_REQUIRED = "kai.scheduler/segment-topology-required-placement"
LAYERS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
TEMPLATE = "spec.template.metadata.annotations"
WORKER = "TFJob ml/train: spec.tfReplicaSpecs.Worker.template.metadata.annotations"
VALID = (
    "(valid: block, example.com/topology-block, example.com/topology-rack, example.com/topology-zone, hostname,"
    " kubernetes.io/hostname, node, rack, zone)"
)
RI_EXAMPLE = Path(__file__).parent.parent / "examples" / "workloads" / "raycluster-resourceinterface.yaml"


def resource_interface(required_path: str) -> dict[str, Any]:
    ri, _ = yaml.safe_load_all(RI_EXAMPLE.read_text())
    ri = copy.deepcopy(ri)
    ri["spec"]["gangScheduling"]["podGroups"][0]["requiredTopologyConstraintsPath"] = required_path
    return dict(ri)


def job_scheduling(key: str) -> dict[str, Any]:
    w = job()
    w["spec"]["scheduling"] = {"schedulingConstraints": {"topology": [{"key": key}]}}
    return w


CASES: list[tuple[str, list[dict[str, Any]], str]] = [
    (
        "segments-of-256-workers",  # 128 segments share the constraint: said once
        [
            kubeflow(
                "TFJob", {"Worker": (256, {"kai.scheduler/segment-size": "2", SEG_REQUIRED: "Rack"})}, annotations=ON
            )
        ],
        f"{WORKER}[{SEG_REQUIRED}]: 'Rack' is not a level of Topology default; did you mean rack?",
    ),
    (
        "template-required",
        [kubeflow("TFJob", {"Worker": (2, {REQUIRED: "rak"})})],
        f"{WORKER}[{REQUIRED}]: 'rak' is not a level of Topology default; did you mean rack?",
    ),
    (
        "workload-preferred-beside-required",
        [job(annotations={REQUIRED: "rack", PREFERRED: "row"})],
        f"Job ml/batch: metadata.annotations[{PREFERRED}]: 'row' is not a level of Topology default {VALID}",
    ),
    (
        "kueue-alias",
        [job(ann={"kueue.x-k8s.io/prefer-topology": "Block"})],
        f"Job ml/batch: {TEMPLATE}[kueue.x-k8s.io/prefer-topology]: 'Block' is not a level of Topology default;"
        " did you mean block?",
    ),
    (
        "kueue-slice",
        [
            job(
                8,
                8,
                ann={"kueue.x-k8s.io/podset-slice-required-topology": "RACK", "kueue.x-k8s.io/podset-slice-size": "4"},
            )
        ],
        f"Job ml/batch: {TEMPLATE}[kueue.x-k8s.io/podset-slice-required-topology]: 'RACK' is not a level of Topology"
        " default; did you mean rack?",
    ),
    (
        "kueue-slice-layer",
        [job(8, 8, ann={LAYERS: '[{"topology": "rck", "size": 4}]'})],
        f"Job ml/batch: {TEMPLATE}[{LAYERS}][0].topology: 'rck' is not a level of Topology default; did you mean rack?",
    ),
    (
        "lws-exclusive",
        [lws(1, 2, annotations={"leaderworkerset.sigs.k8s.io/exclusive-topology": "Rack"})],
        "LeaderWorkerSet ml/llm: metadata.annotations[leaderworkerset.sigs.k8s.io/exclusive-topology]:"
        " 'Rack' is not a level of Topology default; did you mean rack?",
    ),
    (
        "jobset-exclusive",  # both Jobs: said once
        [jobset([("w", 2, 2)], job_ann={"w": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "Rack"}})],
        "JobSet ml/js: spec.replicatedJobs[0].template.metadata.annotations"
        "[alpha.jobset.sigs.k8s.io/exclusive-topology]: 'Rack' is not a level of Topology default; did you mean rack?",
    ),
    (
        "job-scheduling-key",
        [job_scheduling("example.com/topology-Rack")],
        "Job ml/batch: spec.scheduling.schedulingConstraints.topology[0].key: 'example.com/topology-Rack' is not a"
        " level of Topology default; did you mean example.com/topology-rack?",
    ),
    (
        "template-topology-missing",
        [job(ann={KAI_TOPOLOGY: "nope", REQUIRED: "rack"})],
        f"Job ml/batch: {TEMPLATE}[{KAI_TOPOLOGY}]: names Topology 'nope', which does not exist (have: default)",
    ),
    (
        "workload-topology-missing",
        [job(annotations={KAI_TOPOLOGY: "nope"}, ann={REQUIRED: "rack"})],
        f"Job ml/batch: metadata.annotations[{KAI_TOPOLOGY}]: names Topology 'nope', which does not exist"
        " (have: default)",
    ),
    (
        "resource-interface-path",
        [raycluster([("cpu", 1, None)]), resource_interface('"Rack"')],
        "ResourceInterface raycluster: spec.gangScheduling.podGroups[0].requiredTopologyConstraintsPath:"
        " 'Rack' is not a level of Topology default; did you mean rack?",
    ),
]


def built_errors(objects: list[dict[str, Any]], topologies: dict[str, TopologySpec] | None = None) -> list[str]:
    workloads = [o for o in objects if o["kind"] != "ResourceInterface"]
    result = group(*workloads, objects=[o for o in objects if o not in workloads])
    (g,) = result.groups.values()
    assert g.podgroup is not None, g.errors
    built = build_gang(g.podgroup, [], topologies or {"default": TOPO}, subgroup_of=g.subgroup_of)
    return [str(e) for e in built.errors]


@pytest.mark.parametrize(("objects", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_derived_gangs_bad_level_is_named_where_the_user_wrote_it(
    objects: list[dict[str, Any]], message: str
) -> None:
    assert built_errors(objects) == [message]


def test_no_topology_named_among_two_names_the_annotation_that_needs_one() -> None:
    assert built_errors([job(ann={REQUIRED: "rack"})], {"default": TOPO, "other": OTHER}) == [
        f"Job ml/batch: {TEMPLATE}[{REQUIRED}]: names no Topology and 2 exist (default, other); set it or the"
        f" annotation {KAI_TOPOLOGY}"
    ]


def test_two_topologies_in_one_gang_are_named_where_the_second_was_chosen() -> None:
    w = job(annotations={KAI_TOPOLOGY: "default", REQUIRED: "zone"}, ann={KAI_TOPOLOGY: "other", REQUIRED: "rack"})
    assert built_errors([w], {"default": TOPO, "other": OTHER}) == [
        f"Job ml/batch: {TEMPLATE}[{KAI_TOPOLOGY}]: constraints of one gang must use one Topology; found default"
        f" (metadata.annotations[{REQUIRED}]), other ({TEMPLATE}[{REQUIRED}])"
    ]


def test_a_scheduling_k8s_io_groups_key_is_named_on_that_group() -> None:
    root = upstream_group("train", 2, ["example.com/topology-Rack"])
    result = group_pods([parse_pod(pod(f"w-{i}", group="train")) for i in range(2)], ObjectIndex([root]), {})
    g = result.groups["ml/podgroup-train"]
    assert g.podgroup is not None
    assert [str(e) for e in build_gang(g.podgroup, [], {"default": TOPO}).errors] == [
        "PodGroup ml/train: spec.schedulingConstraints.topology[0].key: 'example.com/topology-Rack' is not a level"
        " of Topology default; did you mean example.com/topology-rack?"
    ]


def test_a_podgangs_pack_constraint_is_named_on_the_podgang() -> None:
    workload = pcs(sg_replicas=2)
    workload["spec"]["template"]["topologyConstraint"]["pack"] = {"required": "Zone"}
    pods, owners = pods_of(workload)
    result = group_pods(pods, ObjectIndex([workload, *owners]), {})
    g = result.groups["ml/podgang-llm-0"]
    assert g.podgroup is not None
    assert [str(e) for e in build_gang(g.podgroup, [], {"default": TOPO}).errors] == [
        "PodGang ml/llm-0: spec.topologyConstraint.packConstraint.required: 'Zone' is not a level of Topology"
        " default; did you mean zone?"
    ]


def test_a_constraint_that_cannot_take_effect_is_named_on_the_workload_once() -> None:
    ann = {"kai.scheduler/segment-size": "2", "kai.scheduler/segment-topology-preferred-placement": "zone"}
    w = kubeflow("TFJob", {"Worker": (16, ann)}, annotations={**ON, REQUIRED: "rack"})
    (g,) = group(w).groups.values()
    assert g.podgroup is not None
    built = build_gang(g.podgroup, [], {"default": TOPO}, subgroup_of=g.subgroup_of)
    assert built.warnings == (
        "TFJob ml/train: spec.tfReplicaSpecs.Worker.template.metadata.annotations"
        "[kai.scheduler/segment-topology-preferred-placement]='zone' cannot take effect: it is coarser than"
        f" metadata.annotations[{REQUIRED}]='rack' above it, which already holds the SubGroup in one rack",
    )
