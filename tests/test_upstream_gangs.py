"""Kubernetes' own gang API as input: scheduling.k8s.io PodGroups, CompositePodGroups and a Job's
spec.scheduling place exactly as the equivalent topogang PodGroup does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.simulate.loader import load
from extender.simulate.runner import SimResult, Simulation

ROOT = Path(__file__).resolve().parent.parent
CLUSTER = ROOT / "examples" / "cluster-64.yaml"
NS = "ml"
V1BETA1 = "scheduling.k8s.io/v1beta1"
V1ALPHA3 = "scheduling.k8s.io/v1alpha3"
ZONE, BLOCK, RACK = (f"example.com/topology-{k}" for k in ("zone", "block", "rack"))
JSON = dict[str, Any]


def pod(name: str, gpus: int = 8, *, group: str | None = None, topogang: str | None = None) -> JSON:
    meta: JSON = {"name": name, "namespace": NS}
    spec: JSON = {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}
    if group is not None:
        spec["schedulingGroup"] = {"podGroupName": group}
    if topogang is not None:
        meta["annotations"] = {"pod-group-name": topogang}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def group(name: str, count: int, keys: list[str], parent: str | None = None, **meta: Any) -> JSON:
    spec: JSON = {"schedulingPolicy": {"gang": {"minCount": count}}}
    if keys:
        spec["schedulingConstraints"] = {"topology": [{"key": k} for k in keys]}
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    api = V1ALPHA3 if parent is not None else V1BETA1
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": name, "namespace": NS, **meta}, "spec": spec}


def composite(name: str, count: int, keys: list[str], parent: str | None = None) -> JSON:
    spec: JSON = {"schedulingPolicy": {"gang": {"minGroupCount": count}}}
    if keys:
        spec["schedulingConstraints"] = {"topology": [{"key": k} for k in keys]}
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    return {
        "apiVersion": V1ALPHA3,
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }


def topogang_podgroup(name: str, spec: JSON) -> JSON:
    meta = {"name": name, "namespace": NS}
    return {"apiVersion": "scheduling.topogang.io/v1alpha1", "kind": "PodGroup", "metadata": meta, "spec": spec}


def simulate(tmp_path: Path, objects: list[JSON]) -> SimResult:
    path = tmp_path / f"input-{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return Simulation(load([str(CLUSTER), str(path)])).run()


def placed(result: SimResult) -> dict[str, str | None]:
    return {p.name: p.node for p in result.pods if p.namespace == NS}


def podgroups(result: SimResult) -> dict[str, Any]:
    return {g.key: g for g in result.groups}


def test_a_podgroup_with_two_topology_entries_places_as_the_topogang_podgroup(tmp_path: Path) -> None:
    # block and rack: the finest holds (the API takes one entry today; a second is read all the same)
    upstream = simulate(tmp_path, [group("train", 4, [BLOCK, RACK]), *(pod(f"w-{i}", group="train") for i in range(4))])
    spec = {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    own = simulate(tmp_path, [topogang_podgroup("train", spec), *(pod(f"w-{i}", topogang="train") for i in range(4))])
    assert placed(upstream) == placed(own)
    nodes = list(placed(upstream).values())
    assert all(nodes)
    assert len({n.rsplit("-", 1)[0] for n in nodes if n}) == 1
    assert podgroups(upstream)["ml/podgroup-train"].phase == podgroups(own)["ml/train"].phase


def three_levels() -> list[JSON]:
    """A job in one zone, two halves each in one block, four groups of 2 pods each in one rack."""
    out = [composite("job", 2, [ZONE])]
    for h in range(2):
        out.append(composite(f"half-{h}", 2, [BLOCK], parent="job"))
        for g in range(2):
            name = f"half-{h}-g{g}"
            out.append(group(name, 2, [RACK], parent=f"half-{h}"))
            out += [pod(f"{name}-{i}", group=name) for i in range(2)]
    return out


def three_levels_topogang() -> list[JSON]:
    subgroups: list[JSON] = []
    constraints: JSON = {}
    pods: list[JSON] = []
    for h in range(2):
        subgroups.append({"name": f"half-{h}", "minMember": 2})
        constraints[f"half-{h}"] = {"requiredTopologyLevel": "block"}
        for g in range(2):
            name = f"half-{h}-g{g}"
            subgroups.append({"name": name, "parent": f"half-{h}", "minMember": 2})
            constraints[name] = {"requiredTopologyLevel": "rack"}
            for i in range(2):
                p = pod(f"{name}-{i}", topogang="job")
                p["metadata"]["labels"] = {"kai.scheduler/subgroup-name": name}
                pods.append(p)
    spec = {
        "minMember": 2,
        "subGroups": subgroups,
        "topologyConstraints": {"global": {"requiredTopologyLevel": "zone"}, "subGroups": constraints},
    }
    return [topogang_podgroup("job", spec), *pods]


def test_a_three_level_composite_podgroup_places_as_the_topogang_podgroup(tmp_path: Path) -> None:
    upstream = simulate(tmp_path, three_levels())
    own = simulate(tmp_path, three_levels_topogang())
    assert placed(upstream) == placed(own)
    assert all(placed(upstream).values())
    status = podgroups(upstream)["ml/compositepodgroup-job"]
    theirs = {k.replace("ml/job", "ml/compositepodgroup-job"): v for k, v in podgroups(own)["ml/job"].domains.items()}
    assert dict(status.domains) == theirs
    assert len(status.domains) == 7  # the job's zone, two blocks, four racks


def job(scheduling: JSON | None, parallelism: int = 4) -> JSON:
    spec: JSON = {
        "parallelism": parallelism,
        "completions": parallelism,
        "completionMode": "Indexed",
        "template": {"spec": pod("x")["spec"] | {"restartPolicy": "Never"}},
    }
    if scheduling is not None:
        spec["scheduling"] = scheduling
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train", "namespace": NS}, "spec": spec}


def test_a_job_with_spec_scheduling_places_as_the_topogang_podgroup(tmp_path: Path) -> None:
    scheduling = {"schedulingPolicy": {"gang": {"minCount": 4}}, "schedulingConstraints": {"topology": [{"key": RACK}]}}
    upstream = simulate(tmp_path, [job(scheduling)])
    spec = {"minMember": 4, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}}
    own = simulate(
        tmp_path, [topogang_podgroup("train", spec), *(pod(f"train-{i}", topogang="train") for i in range(4))]
    )
    assert placed(upstream) == placed(own)
    assert all(placed(upstream).values())


def test_explain_shows_the_tree_of_a_composite_podgroup_by_its_roots_name(capsys: pytest.CaptureFixture[str]) -> None:
    from extender.cli import main

    example = ROOT / "examples" / "workloads" / "upstream-composite.yaml"
    assert main(["explain", "default/serving", "-f", str(CLUSTER), "-f", str(example)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("default/compositepodgroup-serving  (CompositePodGroup default/serving)  Scheduled")
    assert "required zone ([CompositePodGroup serving] spec.schedulingConstraints)" in out
    assert "SubGroup decode-workers: min 4 pods; required rack ([PodGroup decode-workers]" in out
