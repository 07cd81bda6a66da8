"""Bad input through `topogang simulate` and `explain -f`: the error names the field, one bad
workload (a typo, a billion replicas, a jq expression that never ends) is Invalid alone while
the others are placed, and pending pods say exactly which resources are short.

Cluster: two nodes of 8 GPUs, racks r1 and r2 (tests/test_simulate_cli.py's NODES).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from extender.cli import main
from tests.test_simulate_cli import NODES, pods, write

GOOD = """
---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {name: good}
spec: {minMember: 1}
""" + pods("good", 1)

RAY_RI = """
---
apiVersion: scheduling.topogang.io/v1alpha1
kind: ResourceInterface
metadata: {name: ray}
spec:
  targetGVK: {group: ray.io, version: v1, kind: RayCluster}
  gangScheduling:
    podGroups:
      - subgroups:
          - componentName: %s
            minReplicas: "1"
---
apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: rc}
spec:
  headGroupSpec:
    template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
"""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def simulate(tmp: Path, capsys: pytest.CaptureFixture[str], text: str, exit_code: int = 0) -> dict[str, Any]:
    code, out, err = run(capsys, "simulate", "-o", "json", "-f", str(write(tmp, "in.yaml", NODES + text)))
    assert code == exit_code, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def groups(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["name"]: g for g in doc["podGroups"]}


def nodes(doc: dict[str, Any]) -> dict[str, str | None]:
    return {p["name"]: p["node"] for p in doc["pods"]}


# -- unknown fields ---------------------------------------------------------------------------------------


TYPO_PODGROUP = """
---
apiVersion: scheduling.topogang.io/v1alpha1
kind: PodGroup
metadata: {name: typo}
spec: {minMember: 1, topologyConstraints: {global: {requiredTopologyLevl: rack}}}
""" + pods("typo", 1)
TYPO_MESSAGE = (
    "PodGroup default/typo: spec.topologyConstraints.global.requiredTopologyLevl: unknown field;"
    " did you mean requiredTopologyLevel?"
)


def test_a_misspelt_podgroup_field_is_reported_by_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = simulate(tmp_path, capsys, TYPO_PODGROUP + GOOD, exit_code=3)
    assert groups(doc)["typo"]["phase"] == "Invalid"
    assert groups(doc)["typo"]["message"] == TYPO_MESSAGE
    assert nodes(doc) == {"typo-0": None, "good-0": "n1"}


def test_a_misspelt_podgroup_field_is_reported_by_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "in.yaml", NODES + TYPO_PODGROUP)
    code, out, _ = run(capsys, "explain", "default/typo", "-f", str(path))
    assert code == 0
    assert out.splitlines()[:2] == ["default/typo  (PodGroup default/typo)  Invalid", f"  {TYPO_MESSAGE}"]


def test_a_misspelt_topology_field_stops_simulate_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = NODES.replace("nodeLabel:", "nodeLable:")
    code, _, err = run(capsys, "simulate", "-f", str(write(tmp_path, "in.yaml", text)))
    assert code == 2
    assert "Topology t: spec.levels[0].nodeLable: unknown field; did you mean nodeLabel?" in err


def test_a_misspelt_resource_interface_field_is_reported_by_simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (RAY_RI % "head").replace("minReplicas:", "minReplica:") + GOOD
    doc = simulate(tmp_path, capsys, text, exit_code=3)
    assert groups(doc)["raycluster-rc"]["message"] == (
        "ResourceInterface ray: spec.gangScheduling.podGroups[0].subgroups[0].minReplica: unknown field;"
        " did you mean minReplicas?; ResourceInterface ray: spec.gangScheduling.podGroups[0].subgroups[0]: a leaf"
        " subgroup needs minReplicas or a minReplicasPath that resolves"
    )
    assert nodes(doc)["good-0"] == "n1"


# -- limits and runaway expressions: one workload Invalid, the rest placed -----------------------------------


def test_a_tfjob_with_a_billion_replicas_is_invalid_and_the_rest_is_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tfjob = """
---
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: huge}
spec: {tfReplicaSpecs: {Worker: {replicas: 1000000000, template: {spec: {containers: []}}}}}
"""
    doc = simulate(tmp_path, capsys, tfjob + GOOD, exit_code=3)
    assert groups(doc)["tfjob-huge"]["phase"] == "Invalid"
    assert groups(doc)["tfjob-huge"]["reason"] == "Invalid"
    assert groups(doc)["tfjob-huge"]["message"].endswith(
        "TFJob default/huge: spec.tfReplicaSpecs.Worker.replicas: is 1,000,000,000; topogang's limit is 100,000"
        " (the README lists the limits)"
    )
    assert nodes(doc) == {"good-0": "n1"}


def test_a_jq_expression_that_never_ends_is_invalid_and_the_rest_is_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = simulate(tmp_path, capsys, RAY_RI % '"(def f: f; f)"' + GOOD, exit_code=3)
    assert groups(doc)["raycluster-rc"]["message"] == (
        "ResourceInterface ray: spec.gangScheduling.podGroups[0].subgroups[0].componentName:"
        " expression '(def f: f; f)' did not finish within the 1 s budget"
    )
    assert nodes(doc) == {"rc-head": None, "good-0": "n1"}


# -- exact messages -------------------------------------------------------------------------------------------


PLAIN = """
---
apiVersion: v1
kind: Pod
metadata: {name: greedy}
spec: {containers: [{name: c, resources: {requests: {nvidia.com/gpu: "16", cpu: "1"}}}]}
"""


def test_only_the_resources_really_short_are_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = simulate(tmp_path, capsys, PLAIN)
    (pod,) = doc["pods"]
    # every node has cpu and pod slots to spare: only the GPUs are short
    assert pod["reason"] == "0/2 nodes are available: 2 insufficient nvidia.com/gpu"


def test_json_carries_each_pending_pods_and_groups_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = "---\napiVersion: scheduling.topogang.io/v1alpha1\nkind: PodGroup\nmetadata: {name: big}\n"
    big += "spec: {minMember: 3}\n" + pods("big", 3)
    doc = simulate(tmp_path, capsys, big + PLAIN)
    why = "PodGroup default/big: 3 pods x {nvidia.com/gpu: 8} in the cluster; only 2 fit even with nothing running"
    assert {p["name"]: p["reason"] for p in doc["pods"]} == {
        "big-0": f"topogang: {why}",
        "big-1": f"topogang: {why}",
        "big-2": f"topogang: {why}",
        "greedy": "0/2 nodes are available: 2 insufficient nvidia.com/gpu",
    }
    assert groups(doc)["big"] == {
        "namespace": "default",
        "name": "big",
        "phase": "Pending",
        "reason": "NoCapacity",
        "message": why,  # (3 nodes' worth of pods on 2 nodes: never, even empty: not queued)
    }


def test_a_negative_allocatable_stops_simulate_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = NODES.replace('nvidia.com/gpu: "8", cpu: "8"', 'nvidia.com/gpu: "-8", cpu: "8"', 1)
    code, _, err = run(capsys, "simulate", "-f", str(write(tmp_path, "in.yaml", text)))
    assert code == 2
    assert "Node n1: status.allocatable.nvidia.com/gpu: expected a quantity >= 0, got '-8'" in err
