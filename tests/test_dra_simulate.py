"""Claims through `topogang simulate` and `explain -f`: a gang whose template names a DeviceClass
that does not exist is Invalid with the field named, while a gang on the same cluster is placed;
`explain` shows the devices a pending gang asks for and where they are free.

Cluster: examples/dra/00-cluster.yaml (64 nodes of 8 DRA devices, racks of 8).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from extender.cli import main

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "examples" / "dra" / "00-cluster.yaml"


def gang(name: str, template: str, cls: str, size: int, count: int = 8) -> str:
    docs: list[dict[str, object]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": template},
            "spec": {
                "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": cls, "count": count}}]}}
            },
        },
        {
            "apiVersion": "scheduling.topogang.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "annotations": {"kai.scheduler/topology": "default"}},
            "spec": {"minMember": size, "topologyConstraints": {"global": {"requiredTopologyLevel": "rack"}}},
        },
    ]
    for i in range(size):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{name}-{i}", "annotations": {"pod-group-name": name}},
                "spec": {
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}, "claims": [{"name": "g"}]}}],
                    "resourceClaims": [{"name": "g", "resourceClaimTemplateName": template}],
                },
            }
        )
    return yaml.safe_dump_all(docs)


def test_a_missing_device_class_makes_its_gang_invalid_and_the_other_is_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gangs.yaml").write_text(
        gang("bad", "nope", "gpu.nope", 2) + "---\n" + gang("good", "gpus", "gpu.example.com", 8)
    )
    assert main(["simulate", "-f", str(CLUSTER), "-f", str(tmp_path), "-o", "json"]) == 3  # a gang is Invalid
    doc = json.loads(capsys.readouterr().out)
    phases = {g["name"]: (g["phase"], g["message"]) for g in doc["podGroups"]}
    assert phases["good"][0] == "Scheduled"
    assert phases["bad"][0] == "Invalid"
    assert (
        "ResourceClaimTemplate default/nope: spec.spec.devices.requests[0].exactly: deviceClassName: "
        "names DeviceClass 'gpu.nope', which does not exist"
    ) in phases["bad"][1]


def test_explain_shows_devices_asked_and_free_per_rack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "big.yaml").write_text(gang("big", "gpus", "gpu.example.com", 9))
    assert main(["explain", "-f", str(CLUSTER), "-f", str(tmp_path), "default/big"]) == 0
    out = capsys.readouterr().out
    assert "does not fit: PodGroup default/big: 9 pods x {cpu: 1, devices/gpu.example.com: 8} in one rack" in out
    assert (
        "Devices: devices/gpu.example.com: 72 asked by 9 unbound pod(s); 512 free in the cluster; "
        "free per rack: z1/b1/r1 64, z1/b1/r2 64"
    ) in out
