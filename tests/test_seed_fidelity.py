"""The seeds' own examples and near variants through `topogang simulate`, as a new user runs
them: each workload ends where its annotations say, and nothing it writes is silently dropped.

Unless a test draws its own, the cluster is cluster_yaml(): one zone, blocks b1..b3, racks r1
and r2 in each, two nodes of 8 GPUs a rack, named z1-b1-r1-n1 .. z1-b3-r2-n2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import structlog
import yaml

from extender.cli import main
from extender.simulate.loader import load
from extender.simulate.runner import simulate as run_simulation

ZONE, BLOCK, RACK = "example.com/topology-zone", "example.com/topology-block", "example.com/topology-rack"


@pytest.fixture(autouse=True)
def structlog_defaults() -> Iterator[None]:
    """`explain` configures logging for its process; the next tests get structlog's defaults."""
    yield
    structlog.reset_defaults()


def cluster_yaml(
    blocks: int = 3, racks: int = 2, nodes: int = 2, gpus: int = 8, labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    levels = [{"nodeLabel": lv} for lv in (ZONE, BLOCK, RACK, "kubernetes.io/hostname")]
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "scheduling.topogang.io/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": "default"},
            "spec": {"levels": levels},
        }
    ]
    for b in range(1, blocks + 1):
        for r in range(1, racks + 1):
            for i in range(1, nodes + 1):
                name = f"z1-b{b}-r{r}-n{i}"
                lab = {ZONE: "z1", BLOCK: f"b{b}", RACK: f"r{r}", "kubernetes.io/hostname": name, **(labels or {})}
                docs.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "metadata": {"name": name, "labels": lab},
                        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "pods": "110"}},
                    }
                )
    return docs


def simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str], *docs: Mapping[str, Any]) -> dict[str, Any]:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(list(docs)))
    assert main(["simulate", "--output", "json", "-f", str(path)]) == 0
    return dict(json.loads(capsys.readouterr().out))


def nodes_of(doc: Mapping[str, Any]) -> dict[str, str | None]:
    return {p["name"]: p["node"] for p in doc["pods"]}


def rack(node: str) -> str:
    return node.rsplit("-", 1)[0]


def block(node: str) -> str:
    return node.rsplit("-", 2)[0]


def container(gpus: int = 1) -> dict[str, Any]:
    return {"name": "c", "image": "x", "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "1"}}}


# -- LeaderWorkerSet (the LWS subgroup KEP) -------------------------------------------------------------------


def test_lws_kep_example_puts_subgroups_on_four_racks_and_groups_in_two_blocks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 2 groups of 8, subgroups of 4, exclusive block, subgroup-exclusive rack. Each subgroup
    # would fit one node: only exclusivity keeps the siblings apart.
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "llm",
            "namespace": "default",
            "annotations": {
                "leaderworkerset.sigs.k8s.io/exclusive-topology": BLOCK,
                "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology": RACK,
            },
        },
        "spec": {
            "replicas": 2,
            "leaderWorkerTemplate": {
                "size": 8,
                "subGroupPolicy": {"subGroupSize": 4},
                "workerTemplate": {"spec": {"containers": [container()]}},
            },
        },
    }
    doc = simulate(tmp_path, capsys, *cluster_yaml(), lws)
    got = nodes_of(doc)
    assert len(got) == 16
    assert None not in got.values(), doc["podGroups"]
    racks: dict[str, set[str]] = {}
    blocks: dict[str, set[str]] = {}
    for p in doc["pods"]:
        g = p["podGroup"]
        racks.setdefault(f"{g}/{p['subGroup']}", set()).add(rack(p["node"]))
        blocks.setdefault(g, set()).add(block(p["node"]))
    assert all(len(r) == 1 for r in racks.values()), racks
    assert len(set().union(*racks.values())) == 4  # four subgroups, four racks
    assert all(len(b) == 1 for b in blocks.values()), blocks
    assert len(set().union(*blocks.values())) == 2  # two groups, two blocks


# -- scheduling gates -----------------------------------------------------------------------------


def gang_pod(name: str, group: str, gates: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container()]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": {"pod-group-name": group}},
        "spec": spec,
    }


def podgroup(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": dict(spec),
    }


GATED = [
    podgroup("g", {"minMember": 2}),
    gang_pod("g-0", "g"),
    gang_pod("g-1", "g", ["kueue.x-k8s.io/topology"]),
    podgroup("free", {"minMember": 1}),
    gang_pod("free-0", "free"),
]


def test_a_gated_pod_is_not_scheduled_and_its_gang_waits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([*cluster_yaml(), *GATED]))
    result = run_simulation(load([str(path)]))
    got = {p.name: p for p in result.pods}
    assert got["g-0"].node is None
    assert got["g-1"].node is None  # kube-scheduler would not schedule it, so the gang stays whole
    assert got["free-0"].node is not None
    assert "spec.schedulingGates holds kueue.x-k8s.io/topology" in got["g-1"].reason


def test_explain_says_which_pod_is_gated_and_by_which_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all([*cluster_yaml(), *GATED]))
    assert main(["explain", "default/g", "-f", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Note: default/g-1: gated by kueue.x-k8s.io/topology" in out


# -- nested constraints (KAI's hierarchical PodGroup design) --------------------------------------------------

NESTED = [
    podgroup(
        "nested",
        {
            "minMember": 1,
            "subGroups": [{"name": "a", "minMember": 2}],
            "topologyConstraints": {
                "global": {"requiredTopologyLevel": "rack"},
                "subGroups": {"a": {"requiredTopologyLevel": "block"}},
            },
        },
    ),
    *(
        {
            **gang_pod(f"nested-{i}", "nested"),
            "metadata": {
                **gang_pod(f"nested-{i}", "nested")["metadata"],
                "labels": {"kai.scheduler/subgroup-name": "a"},
            },
        }
        for i in range(2)
    ),
]
NESTED_WARNING = (
    "spec.topologyConstraints.subGroups.a.requiredTopologyLevel='block' cannot take effect: it is coarser than"
    " spec.topologyConstraints.global.requiredTopologyLevel='rack' above it"
)


def test_a_coarser_subgroup_constraint_is_a_warning_in_simulate_and_explain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = simulate(tmp_path, capsys, *cluster_yaml(), *NESTED)
    (group,) = doc["podGroups"]
    assert NESTED_WARNING in group["message"]
    path = tmp_path / "in.yaml"
    assert main(["explain", "default/nested", "-f", str(path)]) == 0
    assert f"Note: {NESTED_WARNING}" in capsys.readouterr().out


# -- Kueue ResourceFlavor (Kueue's TAS KEP) ----------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_pods_admitted_to_a_flavor_use_its_topology_and_its_nodes(
    version: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Two Topologies, so the PodGroup's constraint names none of them by itself: the flavor its
    # pods were admitted to (their nodeSelector holds its nodeLabels) decides.
    blocks_only = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "Topology",
        "metadata": {"name": "blocks"},
        "spec": {"levels": [{"nodeLabel": ZONE}, {"nodeLabel": BLOCK}]},
    }
    flavor = {
        "apiVersion": f"kueue.x-k8s.io/{version}",
        "kind": "ResourceFlavor",
        "metadata": {"name": "tas"},
        "spec": {"nodeLabels": {"example.com/pool": "tas"}, "topologyName": "blocks"},
    }
    cluster = cluster_yaml(blocks=2)
    for n in cluster:
        if n["kind"] == "Node" and "-b2-" in n["metadata"]["name"]:
            n["metadata"]["labels"]["example.com/pool"] = "tas"
    pg = podgroup("kq", {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "block"}}})
    pods = []
    for i in range(4):
        p = gang_pod(f"kq-{i}", "kq")
        p["spec"]["nodeSelector"] = {"example.com/pool": "tas"}
        pods.append(p)
    doc = simulate(tmp_path, capsys, *cluster, blocks_only, flavor, pg, *pods)
    (group,) = doc["podGroups"]
    assert group["phase"] == "Scheduled", group["message"]
    assert {block(n) for n in nodes_of(doc).values() if n} == {"z1-b2"}
