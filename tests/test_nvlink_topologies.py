"""NVLink domains from the labels nodes carry: the shipped Topologies of GPU Feature Discovery's
clique label and of Topograph's labels (manifests/examples/topology-*.yaml), the GB200 NVL72
example (examples/nvl72/) simulated with each, and a gang's NVLink segments never split across
cliques, nor put on a node without a clique, on random racks (hypothesis)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.cli import main
from extender.model.node import NodeInfo
from extender.model.topology import TopologySpec, parse_topology
from extender.placement import ClusterSnapshot, Plan, Unplaceable, build_gang, plan
from tests.builders import GPU, node, pod, podgroup

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "nvl72"
CLIQUE = "nvidia.com/gpu.clique"
# The shipped NVLink Topologies, and the node label keys each reads, coarsest first.
LEVELS = {
    "gpu-clique": [CLIQUE, "kubernetes.io/hostname"],
    "topograph": [
        "fabric.topograph.run/tier-2",
        "fabric.topograph.run/tier-1",
        "fabric.topograph.run/tier-0",
        "accelerator.topograph.run/domain",
        "kubernetes.io/hostname",
    ],
    "topograph-v0": [
        "network.topology.nvidia.com/core",
        "network.topology.nvidia.com/spine",
        "network.topology.nvidia.com/leaf",
        "network.topology.nvidia.com/accelerator",
        "kubernetes.io/hostname",
    ],
}
# Topograph before v1.0 wrote the same values under these keys.
TOPOGRAPH_V0_KEYS = dict(zip(LEVELS["topograph"][:4], LEVELS["topograph-v0"][:4], strict=True))


def shipped(name: str) -> TopologySpec:
    return parse_topology(yaml.safe_load((ROOT / "manifests" / "examples" / f"topology-{name}.yaml").read_text()))


@pytest.mark.parametrize("name", LEVELS)
def test_each_nvlink_topology_reads_its_tools_labels_coarsest_first_and_names_the_nvlink_level(name: str) -> None:
    topo = shipped(name)
    assert topo.name == name
    assert [level.node_label for level in topo.levels] == LEVELS[name]
    assert topo.levels[topo.resolve("nvlink")].node_label == LEVELS[name][-2]


def _example(name: str, tmp_path: Path) -> tuple[Path, Path]:
    """The NVL72 cluster and job, as the Topology NAME reads them: Topograph v0's keys for
    topograph-v0; the job naming NAME."""
    cluster = (EXAMPLE / "00-cluster.yaml").read_text()
    if name == "topograph-v0":
        for new, old in TOPOGRAPH_V0_KEYS.items():
            cluster = cluster.replace(f"{new}:", f"{old}:")
    job = (EXAMPLE / "10-pytorchjob.yaml").read_text()
    assert "kai.scheduler/topology: gpu-clique\n" in job
    (tmp_path / "cluster.yaml").write_text(cluster)
    (tmp_path / "job.yaml").write_text(
        job.replace("kai.scheduler/topology: gpu-clique", f"kai.scheduler/topology: {name}")
    )
    return tmp_path / "cluster.yaml", tmp_path / "job.yaml"


@pytest.mark.parametrize("name", LEVELS)
def test_the_nvl72_job_keeps_every_16_pod_segment_in_one_clique(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, job = _example(name, tmp_path)
    topology = ROOT / "manifests" / "examples" / f"topology-{name}.yaml"
    assert main(["simulate", "-f", str(topology), "-f", str(cluster), "-f", str(job), "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (group,) = doc["podGroups"]
    assert group["phase"] == "Scheduled", group
    cliques = {
        d["metadata"]["name"]: d["metadata"]["labels"].get(CLIQUE)
        for d in yaml.safe_load_all((EXAMPLE / "00-cluster.yaml").read_text())
        if d and d["kind"] == "Node"
    }
    segments: dict[str, list[str]] = {}
    for p in doc["pods"]:
        assert p["node"], p
        if p["subGroup"].startswith("worker-seg-"):
            segments.setdefault(p["subGroup"], []).append(p["node"])
    assert sorted(segments) == ["worker-seg-0", "worker-seg-1", "worker-seg-2"]
    used = set()
    for seg, nodes in segments.items():
        assert len(nodes) == 16, seg
        (clique,) = {cliques[n] for n in nodes}
        assert clique is not None, f"{seg} on a node without a clique"
        used.add(clique)
    assert len(used) == 3
    # Rack 1 has 15 free nodes: no segment of 16 fits there, whatever the label of its nodes.
    assert not any(n.startswith("gb200-r1-") for nodes in segments.values() for n in nodes)


# -- never split, on random racks ----------------------------------------------------------------

RACK_NODES = 18


def _labels(name: str, clique: str | None, rack: int) -> dict[str, str]:
    """What a node of RACK carries that Topology NAME reads (Topograph's accelerator domain read
    from the clique label, as its infiniband providers do; no fabric tier is ever missing)."""
    out = {CLIQUE: clique} if clique is not None else {}
    if name != "gpu-clique":
        tiers = dict(zip(LEVELS["topograph"][:3], ("core-1", f"spine-{rack // 4}", f"leaf-{rack // 2}"), strict=True))
        tiers |= {LEVELS["topograph"][3]: clique} if clique is not None else {}
        out = {**out, **(tiers if name == "topograph" else {TOPOGRAPH_V0_KEYS[k]: v for k, v in tiers.items()})}
    return out


@st.composite
def racks(draw: Any, name: str) -> tuple[list[NodeInfo], dict[str, dict[str, int]], dict[str, str | None]]:
    """NVL72 racks of 18 nodes of 4 GPUs; a rack may be cut into two NVLink partitions (a clique
    each); a node may lack its clique (its fabric is not up) and have GPUs in use."""
    nodes, used, clique_of = [], {}, {}
    for r in range(draw(st.integers(1, 4))):
        cut = draw(st.sampled_from([RACK_NODES, 9, 12]))  # nodes before the second partition
        for n in range(RACK_NODES):
            nm = f"r{r}-n{n:02d}"
            clique = None if draw(st.integers(0, 11)) == 0 else f"uuid-{r}.{1 if n < cut else 2}"
            clique_of[nm] = clique
            nodes.append(node(nm, None, None, None, gpus=4, labels=_labels(name, clique, r)))
            if taken := draw(st.sampled_from([0, 0, 0, 4, 2])):
                used[nm] = {GPU: taken * 1000}
    return nodes, used, clique_of


def _segmented_gang(segments: int, size: int, gpus: int) -> tuple[Any, list[Any]]:
    names = [f"seg-{i}" for i in range(segments)]
    spec = {
        "minMember": segments,
        "subGroups": [{"name": n, "minMember": size} for n in names],
        "topologyConstraints": {"subGroups": {n: {"requiredTopologyLevel": "nvlink"} for n in names}},
    }
    pods = [pod(f"{n}-{i}", gpus=gpus, subgroup=n) for n in names for i in range(size)]
    return podgroup(spec), pods


@pytest.mark.parametrize("name", LEVELS)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_segment_is_never_split_across_cliques_nor_put_where_there_is_no_clique(name: str, data: Any) -> None:
    nodes, used, clique_of = data.draw(racks(name), "racks")
    segments, size = data.draw(st.integers(1, 4), "segments"), data.draw(st.sampled_from([4, 8, 16]), "size")
    gpus = data.draw(st.sampled_from([1, 2, 4]), "GPUs per pod")
    pg, pods = _segmented_gang(segments, size, gpus)
    topo = shipped(name)
    built = build_gang(pg, pods, {topo.name: topo})
    assert built.gang is not None, built.errors
    result = plan(ClusterSnapshot.of(nodes, used), built.gang)
    assert isinstance(result, (Plan, Unplaceable))
    if isinstance(result, Plan):
        cliques: dict[str, set[str | None]] = {}
        for key, where in result.assignments.items():
            cliques.setdefault(key.split("/")[1].rsplit("-", 1)[0], set()).add(clique_of[where])
        for seg, found in cliques.items():
            assert None not in found, f"{seg} on a node without a clique"
            assert len(found) == 1, f"{seg} split across cliques {found}"
    if gpus == 4:  # a pod takes a whole node: the gang fits exactly when the cliques hold its segments
        free: dict[str, int] = {}
        for nd in nodes:
            clique = clique_of[nd.name]
            if clique is not None and nd.name not in used:
                free[clique] = free.get(clique, 0) + 1
        assert isinstance(result, Plan) == (sum(f // size for f in free.values()) >= segments)


def test_a_gang_that_fits_only_across_two_cliques_or_with_a_node_without_one_waits_and_says_why() -> None:
    # 16 pods of a whole node each: clique a has 15 free nodes, clique b 10, and 4 nodes have no
    # clique. By capacity they fit, and a with one node without a clique would hold them.
    def nodes_of(prefix: str, count: int, clique: str | None) -> list[NodeInfo]:
        labels = {CLIQUE: clique} if clique else {}
        return [node(f"{prefix}-{i}", None, None, None, gpus=4, labels=labels) for i in range(count)]

    nodes = nodes_of("a", 15, "uuid-a.1") + nodes_of("b", 10, "uuid-b.1") + nodes_of("x", 4, None)
    topo = shipped("gpu-clique")
    pg, pods = _segmented_gang(1, 16, 4)
    built = build_gang(pg, pods, {topo.name: topo})
    assert built.gang is not None
    result = plan(ClusterSnapshot.of(nodes, None), built.gang)
    assert isinstance(result, Unplaceable)
    assert result.message == (
        "SubGroup seg-0: 16 pods x {cpu: 1, nvidia.com/gpu: 4} in one nvlink; the best nvlink fits 15"
    )
    # A 16th node in clique a, and the segment goes there whole.
    result = plan(ClusterSnapshot.of([*nodes, *nodes_of("a", 16, "uuid-a.1")[15:]], None), built.gang)
    assert isinstance(result, Plan)
    assert {n.rsplit("-", 1)[0] for n in result.assignments.values()} == {"a"}
