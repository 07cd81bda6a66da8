"""The install artefacts on the real control plane.

- manifests/ and scheduler-config/second-scheduler/ rendered by the built kubectl (kustomize) and
  applied server-side: every object accepted (the Deployments as a server-side dry run: there is
  no image to run), the CRDs established, the Deployments within Pod Security "restricted";
- the leader's traffic: the Service selects the leader label topogang puts on its own pod, the
  Deployment is Ready on /synced (both replicas) with a surge-only rollout, the PDB allows one
  pod down;
- the sample objects under examples/ and manifests/examples/, and every PodGroup the grouper
  derives from the example workloads, accepted by the CRDs;
- mistakes refused by the CRDs' schemas and CEL rules with their messages, and (where the
  parser, extender/model, is the reference) refused by the parser too;
- RBAC: the ClusterRole is exactly what the code reads and writes (extender/kube/resources.py),
  the API server says the ServiceAccounts can do that and not more (SubjectAccessReview and
  `kubectl auth can-i --as`), and `topogang serve` with only the ServiceAccount's token syncs
  its caches, leads, labels its own pod as the leader and removes the label when it stops;
- scheduler-config/: the real kube-scheduler starts from each shipped configuration (its
  tlsConfig files pointed at test certificates), and the second scheduler, with its
  ServiceAccount's token, takes its own Lease;
- mTLS: manifests/base/tls.yaml accepted by cert-manager's real CRDs (e2e/crds/cert-manager/, the
  version e2e/kind installs), its certificates are the ones the Deployment and the schedulers
  mount and name, and the probes use the plain-HTTP health port.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import ssl
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.controlplane import Component, ControlPlane, SchedulerSwitch
from e2e.controlplane.plane import free_ports
from e2e.topogang import SHIPPED_CONFIG, Topogang, extender_pki
from extender.grouping.grouper import Link
from extender.grouping.resource_interface import ResourceInterface, group_with, index_resource_interfaces
from extender.kube.leader_label import LEADER_LABEL
from extender.kube.resources import WATCHED
from extender.model.errors import InvalidObject
from extender.model.pod import OwnerRef
from extender.model.podgroup import parse_podgroup
from extender.model.podgroup_body import podgroup_spec_body
from extender.model.topology import parse_topology
from tests.grouping_builders import group_file

pytestmark = [pytest.mark.controlplane, pytest.mark.controlplane_only]

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "manifests"
SECOND_SCHEDULER = ROOT / "scheduler-config" / "second-scheduler"
SECOND_SCHEDULER_CONFIG = SECOND_SCHEDULER / "config.yaml"
KUBEADM_CONFIG = ROOT / "scheduler-config" / "kubeadm" / "kube-scheduler-config.yaml"
KIND = ROOT / "e2e" / "kind"
CERT_MANAGER_CRDS = sorted((ROOT / "e2e" / "crds" / "cert-manager").glob("*.yaml"))
NAMESPACE = "topogang-system"
TOPOGANG_SA = f"system:serviceaccount:{NAMESPACE}:topogang"
SCHEDULER_SA = f"system:serviceaccount:{NAMESPACE}:topogang-scheduler"
FIELD_MANAGER = "e2e-test-manifests"
RBAC_KINDS = ("ClusterRole", "Role")


# -- kubectl ------------------------------------------------------------------------------------------


def kubectl(plane: ControlPlane, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The built kubectl against PLANE as admin; the caller looks at the return code."""
    return subprocess.run(
        [str(plane.kubectl), "--kubeconfig", str(plane.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ok(plane: ControlPlane, *args: str, stdin: str | None = None) -> str:
    done = kubectl(plane, *args, stdin=stdin)
    assert done.returncode == 0, f"kubectl {' '.join(args)}:\n{done.stderr}"
    return done.stdout


def render(plane: ControlPlane, path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(ok(plane, "kustomize", str(path))) if d]


def dump(docs: list[dict[str, Any]]) -> str:
    # JSON documents: every string quoted, so kubectl's YAML reader never takes "y" for a boolean.
    return "\n---\n".join(json.dumps(d) for d in docs)


def dry_run(plane: ControlPlane, docs: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    """Server-side apply as a server-side dry run: every admission step and validation, no write."""
    return kubectl(
        plane, "apply", "--server-side", "--dry-run=server", f"--field-manager={FIELD_MANAGER}", "-f", "-",
        stdin=dump(docs),
    )  # fmt: skip


def token_kubeconfig(plane: ControlPlane, service_account: str, path: Path) -> Path:
    """A kubeconfig for PLANE that authenticates as NAMESPACE's SERVICE_ACCOUNT (a bound token)."""
    token = ok(plane, "create", "token", service_account, "-n", NAMESPACE, "--duration=1h").strip()
    admin = yaml.safe_load(plane.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": service_account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": cluster["name"], "user": service_account}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


# -- the installation, once for the module -------------------------------------------------------------


@dataclass
class Installed:
    topogang: list[dict[str, Any]]  # manifests/ as rendered
    scheduler: list[dict[str, Any]]  # scheduler-config/second-scheduler/ as rendered
    deployments_dry_run: subprocess.CompletedProcess[str]

    def of(self, kind: str, name: str) -> dict[str, Any]:
        (found,) = [d for d in self.topogang + self.scheduler if d["kind"] == kind and d["metadata"]["name"] == name]
        return found


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> Iterator[Installed]:
    plane = control_plane
    for crd in CERT_MANAGER_CRDS:  # cert-manager's API, so tls.yaml is checked against its schema
        ok(plane, "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", str(crd))
    ok(plane, "wait", "--for=condition=Established", "--timeout=60s", "crd/certificates.cert-manager.io",
       "crd/issuers.cert-manager.io")  # fmt: skip
    topogang = render(plane, MANIFESTS)
    scheduler = render(plane, SECOND_SCHEDULER)
    applied = [d for d in topogang + scheduler if d["kind"] != "Deployment"]
    deployments = [d for d in topogang + scheduler if d["kind"] == "Deployment"]
    # --force-conflicts: the e2e scenarios may have created the same CRDs already (with POST).
    ok(plane, "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}", "-f", "-",
       stdin=dump(applied))  # fmt: skip
    crds = [f"crd/{d['metadata']['name']}" for d in topogang if d["kind"] == "CustomResourceDefinition"]
    ok(plane, "wait", "--for=condition=Established", "--timeout=60s", *crds)
    try:
        yield Installed(topogang, scheduler, dry_run(plane, deployments))
    finally:
        # The CRDs stay (other modules install the same ones); the rest goes.
        leftovers = [d for d in applied if d["kind"] not in ("CustomResourceDefinition", "Namespace")]
        kubectl(plane, "delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=dump(leftovers))
        kubectl(plane, "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false")


# -- objects ---------------------------------------------------------------------------------------------


def test_every_object_is_accepted_and_the_crds_are_established(
    control_plane: ControlPlane, installed: Installed
) -> None:
    kinds = sorted({d["kind"] for d in installed.topogang})
    assert kinds == [
        "Certificate", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "Deployment", "Issuer",
        "Namespace", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount",
    ]  # fmt: skip
    # The Deployments pass every admission step, Pod Security "restricted" of the namespace included
    # (it warns about pod templates that a pod could not be created from).
    dry = installed.deployments_dry_run
    assert dry.returncode == 0, dry.stderr
    assert "deployment.apps/topogang serverside-applied (server dry run)" in dry.stdout
    assert "deployment.apps/topogang-scheduler serverside-applied (server dry run)" in dry.stdout
    assert "PodSecurity" not in dry.stderr
    for name in ("podgroups", "topologies", "resourceinterfaces"):
        crd = json.loads(ok(control_plane, "get", "crd", f"{name}.scheduling.topogang.io", "-o", "json"))
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions["Established"] == conditions["NamesAccepted"] == "True"
    # Kubernetes' recommended labels on every object; the image named in one place.
    for doc in installed.topogang + installed.scheduler:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "topogang", doc["metadata"]["name"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    (container,) = installed.of("Deployment", "topogang")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"topogang:{version}"


def test_the_service_selects_the_leader_and_every_synced_replica_is_ready(installed: Installed) -> None:
    """Readiness is /synced (leader or follower), so a rollout surges a new pod and removes an
    old one once it is Ready, and a drain may evict either replica; the Service's selector is the
    pods' plus the label the leader puts on its own pod (POD_NAME, POD_NAMESPACE)."""
    deployment = installed.of("Deployment", "topogang")
    template = deployment["spec"]["template"]
    (container,) = template["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/synced"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # The probes present no client certificate: they use the plain-HTTP health listener.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    flags = dict(a.removeprefix("--").split("=", 1) for a in container["args"])
    assert flags["health-listen"] == f"0.0.0.0:{ports['health']}"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["port"] == "health"
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in container["env"]}
    assert (env["POD_NAME"], env["POD_NAMESPACE"]) == ("metadata.name", "metadata.namespace")

    pods = deployment["spec"]["selector"]["matchLabels"]
    service = installed.of("Service", "topogang")
    assert service["spec"]["selector"] == {**pods, LEADER_LABEL: "true"}
    assert LEADER_LABEL not in template["metadata"]["labels"]  # only the leader, at run time, has it

    pdb = installed.of("PodDisruptionBudget", "topogang")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": pods}}


def test_no_rbac_rule_uses_a_wildcard(installed: Installed) -> None:
    for doc in installed.topogang + installed.scheduler:
        if doc["kind"] in RBAC_KINDS:
            for rule in doc["rules"]:
                for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in rule.get(key, []), (doc["metadata"]["name"], rule)


def sample_objects() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted([*ROOT.glob("examples/**/*.yaml"), *MANIFESTS.glob("examples/*.yaml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            # (Kubernetes' own scheduling.k8s.io groups: e2e/test_upstream.py, on a plane that serves them)
            ours = doc and not str(doc.get("apiVersion", "")).startswith("scheduling.k8s.io/")
            if ours and doc.get("kind") in ("PodGroup", "Topology", "ResourceInterface"):
                out.append((f"{path.relative_to(ROOT)}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return out


SAMPLES = sample_objects()


def in_default_namespace(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] != "PodGroup":
        return doc
    return {**doc, "metadata": {**doc["metadata"], "namespace": "default"}}


@pytest.mark.parametrize("doc", [d for _, d in SAMPLES], ids=[i for i, _ in SAMPLES])
def test_the_sample_objects_are_accepted(
    control_plane: ControlPlane, installed: Installed, doc: dict[str, Any]
) -> None:
    done = dry_run(control_plane, [in_default_namespace(doc)])
    assert done.returncode == 0, done.stderr
    if doc["kind"] == "PodGroup":
        parse_podgroup(doc)
    elif doc["kind"] == "Topology":
        parse_topology(doc)
    else:
        assert index_resource_interfaces([doc])[1] == []


def derived_podgroups() -> list[dict[str, Any]]:
    """Every gang the grouper makes of the example workloads, as the PodGroup object topogang
    writes for it (extender/model/podgroup_body.py)."""
    out = []
    workloads = ("examples/workloads/*.yaml", "examples/tfjob-segments/*.yaml", "examples/nvl72/*.yaml")
    for path in sorted(p for pattern in workloads for p in ROOT.glob(pattern)):
        for grouping in group_file(path)[0].groups.values():
            spec = grouping.podgroup
            assert spec is not None, grouping.errors
            out.append({
                "apiVersion": "scheduling.topogang.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": spec.name, "namespace": "default"},
                "spec": podgroup_spec_body(spec),
            })  # fmt: skip
    return out


def test_every_podgroup_the_grouper_derives_is_accepted(control_plane: ControlPlane, installed: Installed) -> None:
    docs = derived_podgroups()
    assert len(docs) >= 10
    assert any(d["spec"].get("subGroups") for d in docs)
    done = dry_run(control_plane, docs)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("serverside-applied (server dry run)") == len(docs)


# -- mistakes --------------------------------------------------------------------------------------------


def podgroup(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": spec,
    }


def topology(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": "bad"},
        "spec": spec,
    }


def resource_interface(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.topogang.io/v1alpha1",
        "kind": "ResourceInterface",
        "metadata": {"name": "bad"},
        "spec": spec,
    }


RACK = {"requiredTopologyLevel": "rack"}
GVK = {"group": "ray.io", "version": "v1", "kind": "RayCluster"}


@dataclass(frozen=True)
class Mistake:
    id: str
    doc: dict[str, Any]
    says: str  # in the API server's answer
    # The parser's verdict on the same object: True it refuses it too; False the schema is
    # deliberately stricter (an empty constraint is ignored by the parser, a mistyped label key
    # matches no node); None: not a PodGroup or Topology.
    parser_refuses: bool | None


MISTAKES = [
    # PodGroup
    Mistake("duplicate-subgroup-names", podgroup({"subGroups": [{"name": "a"}, {"name": "a"}]}),
            'duplicate entries for key [name="a"]', True),
    Mistake("minmember-and-minsubgroup", podgroup({"minMember": 1, "minSubGroup": 1, "subGroups": [{"name": "a"}]}),
            "spec.minSubGroup: Invalid value: set either minMember or minSubGroup on one level, not both", True),
    Mistake("subgroup-minmember-and-minsubgroup",
            podgroup({"subGroups": [{"name": "a"}, {"name": "b", "parent": "a", "minMember": 1, "minSubGroup": 1}]}),
            "spec.subGroups[1].minSubGroup: Invalid value: set either minMember or minSubGroup", True),
    Mistake("negative-minmember", podgroup({"minMember": -1}),
            "spec.minMember in body should be greater than or equal to 0", True),
    Mistake("minmember-not-a-number", podgroup({"minMember": "two"}),
            ".spec.minMember: expected numeric (int or float), got string", True),
    Mistake("misspelt-field", podgroup({"minMembers": 2}), ".spec.minMembers: field not declared in schema", True),
    Mistake("parent-does-not-exist", podgroup({"subGroups": [{"name": "a", "parent": "nowhere"}]}),
            "a SubGroup's parent must name another SubGroup of this PodGroup", True),
    Mistake("own-parent", podgroup({"subGroups": [{"name": "a", "parent": "a"}]}),
            "spec.subGroups[0].parent: Invalid value: a SubGroup cannot be its own parent", True),
    Mistake("minmember-above-top-level-subgroups",
            podgroup({"minMember": 3, "subGroups": [{"name": "a"}, {"name": "b"}]}),
            "minMember counts the top-level SubGroups here and is larger than their number", True),
    Mistake("minsubgroup-without-subgroups", podgroup({"minSubGroup": 1}),
            "minSubGroup counts child SubGroups, but the PodGroup has none; use minMember", True),
    Mistake("empty-constraint", podgroup({"topologyConstraints": {"global": {"topology": "default"}}}),
            "a topology constraint needs requiredTopologyLevel, preferredTopologyLevel or both", False),
    Mistake("constraint-for-an-unknown-subgroup",
            podgroup({"subGroups": [{"name": "a"}], "topologyConstraints": {"subGroups": {"b": RACK}}}),
            "every key of topologyConstraints.subGroups must name a SubGroup of this PodGroup", True),
    Mistake("set-of-unknown-subgroups",
            podgroup({"subGroups": [{"name": "a"}],
                      "topologyConstraints": {"subGroupSets": [{"subGroups": ["a", "b"], "constraint": RACK}]}}),
            "every name in topologyConstraints.subGroupSets[].subGroups must be a SubGroup of this PodGroup", True),
    Mistake("singular-and-global-constraint",
            podgroup({"topologyConstraint": RACK, "topologyConstraints": {"global": RACK}}),
            "set either spec.topologyConstraint or spec.topologyConstraints.global, not both", True),
    # Topology
    Mistake("topology-without-levels", topology({}), "spec.levels: Required value", True),
    Mistake("topology-with-no-level", topology({"levels": []}), "spec.levels in body should have at least 1 items",
            True),
    Mistake("level-label-twice", topology({"levels": [{"nodeLabel": "example.com/rack"}] * 2}),
            "each node label can be one level only", True),
    Mistake("alias-twice",
            topology({"levels": [{"nodeLabel": "example.com/a", "alias": "x"},
                                 {"nodeLabel": "example.com/b", "alias": "x"}]}),
            "an alias can name one level only", True),
    Mistake("hostname-not-last",
            topology({"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "example.com/rack"}]}),
            "kubernetes.io/hostname must be the last (finest) level", True),
    Mistake("not-a-label-key", topology({"levels": [{"nodeLabel": "example.com/topology rack"}]}),
            "spec.levels[0].nodeLabel in body should match", False),
    # ResourceInterface
    Mistake("resourceinterface-without-target", resource_interface({"gangScheduling": {}}),
            "spec.targetGVK: Required value", None),
    Mistake("classifier-on-a-parent-entry",
            resource_interface({"targetGVK": GVK, "gangScheduling": {"podGroups": [{"subgroups": [
                {"componentName": "a", "podClassifier": {"matchLabels": {"x": "y"}},
                 "subgroups": [{"componentName": "b", "minReplicas": 1}]}]}]}}),
            "pods join leaf subgroups; an entry with subgroups cannot have a podClassifier", None),
    Mistake("unknown-operator",
            resource_interface({"targetGVK": GVK, "gangScheduling": {"podGroups": [{"subgroups": [
                {"componentName": "a", "podClassifier": {"matchExpressions": [{"key": "x", "operator": "Is"}]}}]}]}}),
            'Unsupported value: "Is"', None),
]  # fmt: skip


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.id for m in MISTAKES])
def test_mistakes_are_refused_with_a_message_naming_them(
    control_plane: ControlPlane, installed: Installed, mistake: Mistake
) -> None:
    done = dry_run(control_plane, [mistake.doc])
    assert done.returncode != 0, f"accepted: {mistake.doc}"
    assert mistake.says in done.stderr
    if mistake.parser_refuses is None:
        return
    parse = parse_podgroup if mistake.doc["kind"] == "PodGroup" else parse_topology
    if mistake.parser_refuses:
        with pytest.raises(InvalidObject):
            parse(mistake.doc)
    else:
        parse(mistake.doc)


def test_the_min_column_shows_min_member_or_min_sub_group(control_plane: ControlPlane, installed: Installed) -> None:
    """`kubectl get podgroups`: the API server's table (the CRD's printer columns) has one Min
    column, filled from whichever of minMember and minSubGroup the PodGroup sets."""
    by_member = podgroup({"minMember": 3}) | {"metadata": {"name": "min-member", "namespace": "default"}}
    by_subgroup = podgroup(
        {"minSubGroup": 2, "subGroups": [{"name": "a", "minMember": 1}, {"name": "b", "minMember": 1}]}
    ) | {"metadata": {"name": "min-subgroup", "namespace": "default"}}
    ok(control_plane, "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-",
       stdin=dump([by_member, by_subgroup]))  # fmt: skip
    try:
        table = ok(control_plane, "get", "podgroups.scheduling.topogang.io", "-n", "default", "min-member",
                   "min-subgroup")  # fmt: skip
    finally:
        kubectl(control_plane, "delete", "podgroups.scheduling.topogang.io", "-n", "default", "min-member",
                "min-subgroup", "--wait=false")  # fmt: skip
    header, *rows = table.strip().splitlines()
    assert header.split().count("MIN") == 1, table
    start = header.index("MIN")  # columns are aligned; Phase before it is blank without a status
    assert {row.split()[0]: row[start:].split()[0] for row in rows} == {"min-member": "3", "min-subgroup": "2"}, table


@pytest.mark.asyncio(loop_scope="session")
async def test_make_cluster_installs_the_crds_and_a_topology_of_its_nodes_labels(
    control_plane: ControlPlane, installed: Installed
) -> None:
    """What `make cluster` adds after its fake nodes: topogang's CRDs and a Topology whose levels
    are the labels those nodes carry, so a new user can create a PodGroup at once."""
    from e2e.controlplane.__main__ import install_crds
    from e2e.controlplane.fakenodes import HOSTNAME_LABEL, TopologyLabels

    name = await install_crds(control_plane.kubeconfig)
    try:
        body = json.loads(ok(control_plane, "get", "topologies.scheduling.topogang.io", name, "-o", "json"))
    finally:
        # Other tests count on the Topologies they make being the only ones.
        kubectl(control_plane, "delete", "topologies.scheduling.topogang.io", name, "--wait=false")
    labels = TopologyLabels()
    want = [labels.zone, labels.block, labels.rack, HOSTNAME_LABEL]
    assert [lv["nodeLabel"] for lv in body["spec"]["levels"]] == want
    parse_topology(body)


# Misspelt fields: kubectl's strict field validation (client-side apply, the default
# --validate=strict) and server-side apply both refuse them, because the schemas are structural;
# topogang's parsers refuse the same objects, naming the field, when they come from elsewhere
# (an older CRD, a simulation input).
TYPOS = [
    ("podgroup", podgroup({"minMember": 1, "topologyConstraints": {"global": {"requiredTopologyLevl": "rack"}}}),
     "spec.topologyConstraints.global.requiredTopologyLevl"),
    ("topology", topology({"levels": [{"nodeLabel": "example.com/topology-rack", "alais": "rack"}]}),
     "spec.levels[0].alais"),
    ("resourceinterface",
     resource_interface({"targetGVK": GVK, "gangScheduling": {"podGroups": [{"requiredTopologyLevl": "rack"}]}}),
     "spec.gangScheduling.podGroups[0].requiredTopologyLevl"),
]  # fmt: skip


def topogang_refusal(doc: dict[str, Any]) -> str:
    """What topogang says about DOC (a PodGroup, Topology or ResourceInterface)."""
    if doc["kind"] == "ResourceInterface":
        link = Link(OwnerRef("ray.io/v1", "RayCluster", "rc", "u", True), "default", {"spec": {}})
        draft = group_with(ResourceInterface("bad", "ray.io/v1", "RayCluster", doc), link)
        assert draft is not None
        return "; ".join(str(e) for e in draft.errors)
    parse = parse_podgroup if doc["kind"] == "PodGroup" else parse_topology
    with pytest.raises(InvalidObject) as caught:
        parse(doc)
    return str(caught.value)


@pytest.mark.parametrize(("doc", "field"), [t[1:] for t in TYPOS], ids=[t[0] for t in TYPOS])
def test_a_misspelt_field_is_refused_by_strict_validation_and_by_topogang(
    control_plane: ControlPlane, installed: Installed, doc: dict[str, Any], field: str
) -> None:
    client_side = kubectl(control_plane, "apply", "--validate=strict", "--dry-run=server", "-f", "-", stdin=dump([doc]))
    assert client_side.returncode != 0, f"accepted: {doc}"
    assert f'unknown field "{field}"' in client_side.stderr, client_side.stderr
    server_side = dry_run(control_plane, [doc])
    assert server_side.returncode != 0, f"accepted: {doc}"
    assert f"{field}: field not declared in schema" in server_side.stderr, server_side.stderr
    assert f"{field}: unknown field" in topogang_refusal(doc)


# -- RBAC ----------------------------------------------------------------------------------------------------

READ = ("get", "list", "watch")
WRITES = {
    ("", "pods/binding", "create"),
    ("", "pods/eviction", "create"),
    ("", "pods", "patch"),
    ("", "pods/status", "patch"),  # steer: status.nominatedNodeName
    ("events.k8s.io", "events", "create"),
    ("events.k8s.io", "events", "patch"),
    ("", "events", "create"),
    ("", "events", "patch"),
    ("", "events", "list"),  # a new leader reads back the hour's moves (kube/moved.py)
    ("scheduling.topogang.io", "podgroups", "create"),
    ("scheduling.topogang.io", "podgroups", "patch"),
    ("scheduling.topogang.io", "podgroups", "update"),
    ("scheduling.topogang.io", "podgroups/status", "patch"),
    ("scheduling.topogang.io", "podgroups/status", "update"),
    ("scheduling.k8s.io", "podgroups/status", "patch"),
    ("scheduling.k8s.io", "compositepodgroups/status", "patch"),
}
NEEDED = {(r.group, r.plural, verb) for r in WATCHED for verb in READ} | WRITES


def rule_triples(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_cluster_role_is_exactly_what_the_code_reads_and_writes(installed: Installed) -> None:
    granted = rule_triples(installed.of("ClusterRole", "topogang"))
    assert sorted(granted - NEEDED) == []
    assert sorted(NEEDED - granted) == []


def allowed(plane: ControlPlane, user: str, group: str, resource: str, verb: str, namespace: str = "") -> bool:
    """The API server's SubjectAccessReview for USER, a ServiceAccount (with its groups); it needs no
    discovery, so it answers for kinds whose CRDs are not installed (KAI's, Kueue's, Ray's...)."""
    plural, _, subresource = resource.partition("/")
    attributes = {"group": group, "resource": plural, "verb": verb}
    if subresource:
        attributes["subresource"] = subresource
    if namespace:
        attributes["namespace"] = namespace
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"],
            "resourceAttributes": attributes,
        },
    }
    answer = json.loads(ok(plane, "create", "-o", "json", "-f", "-", stdin=json.dumps(review)))
    return bool(answer["status"].get("allowed"))


def test_the_service_account_may_do_everything_topogang_does(control_plane: ControlPlane, installed: Installed) -> None:
    refused = [
        (group, resource, verb)
        for group, resource, verb in sorted(NEEDED)
        if not allowed(control_plane, TOPOGANG_SA, group, resource, verb, namespace="ml")
    ]
    assert refused == []


CAN_I = [  # kubectl auth can-i ARGS --as=<the topogang ServiceAccount>, and the answer
    ("list pods --all-namespaces", True),
    ("watch deployments.apps --all-namespaces", True),  # whether a Deployment asks to be a gang
    ("watch nodes", True),
    ("create pods --subresource=binding -n ml", True),
    ("patch pods -n ml", True),
    ("get pods/topogang-e2e -n topogang-system", True),  # its own pod: the leader label
    ("patch pods/topogang-e2e -n topogang-system", True),
    ("create events.events.k8s.io -n ml", True),
    ("patch podgroups.scheduling.topogang.io --subresource=status -n ml", True),
    ("get leases/topogang -n topogang-system", True),
    ("update leases/topogang -n topogang-system", True),
    ("create leases -n topogang-system", True),
    ("delete pods -n ml", False),
    ("create pods -n ml", False),
    ("update pods -n ml", False),
    ("get secrets -n ml", False),
    ("list secrets --all-namespaces", False),
    ("get secrets -n topogang-system", False),
    ("list configmaps -n ml", False),
    ("update nodes", False),
    ("patch nodes --subresource=status", False),
    ("delete podgroups.scheduling.topogang.io -n ml", False),
    ("create topologies.scheduling.topogang.io", False),
    ("update leases/topogang -n kube-system", False),
    ("update leases/kube-scheduler -n kube-system", False),
    ("update leases/another -n topogang-system", False),
    ("delete leases/topogang -n topogang-system", False),
    ("create clusterrolebindings", False),
    ("impersonate users", False),
    ("create deployments.apps -n topogang-system", False),
]


@pytest.mark.parametrize(("question", "answer"), CAN_I, ids=[q for q, _ in CAN_I])
def test_kubectl_auth_can_i_as_the_service_account(
    control_plane: ControlPlane, installed: Installed, question: str, answer: bool
) -> None:
    done = kubectl(control_plane, "auth", "can-i", *question.split(), f"--as={TOPOGANG_SA}")
    assert done.stdout.strip() == ("yes" if answer else "no"), done.stderr


SCHEDULER_CAN_I = [  # the second scheduler's ServiceAccount
    ("create pods --subresource=binding -n ml", True),
    ("list nodes", True),
    ("get leases/topogang-scheduler -n topogang-system", True),
    ("update leases/topogang-scheduler -n topogang-system", True),
    ("get configmaps/extension-apiserver-authentication -n kube-system", True),
    ("update leases/topogang -n topogang-system", False),  # topogang's Lease is not the scheduler's
    ("get secrets -n ml", False),
    ("delete nodes", False),
]


@pytest.mark.parametrize(("question", "answer"), SCHEDULER_CAN_I, ids=[q for q, _ in SCHEDULER_CAN_I])
def test_kubectl_auth_can_i_as_the_second_schedulers_service_account(
    control_plane: ControlPlane, installed: Installed, question: str, answer: bool
) -> None:
    done = kubectl(control_plane, "auth", "can-i", *question.split(), f"--as={SCHEDULER_SA}")
    assert done.stdout.strip() == ("yes" if answer else "no"), done.stderr


# The pod `topogang serve` is told it runs in (POD_NAME, POD_NAMESPACE), within Pod Security
# "restricted"; its scheduling gate keeps it from ever being scheduled.
OWN_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "topogang-e2e", "namespace": NAMESPACE, "labels": {"app.kubernetes.io/name": "topogang"}},
    "spec": {
        "schedulingGates": [{"name": "e2e.topogang.io/never"}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "topogang",
                "image": "topogang",
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    },
}


def own_pod_labels(plane: ControlPlane) -> dict[str, str]:
    pod = json.loads(ok(plane, "get", "pod", OWN_POD["metadata"]["name"], "-n", NAMESPACE, "-o", "json"))
    return dict(pod["metadata"].get("labels") or {})


def lease_holder(plane: ControlPlane, name: str) -> str:
    lease = kubectl(plane, "get", "lease", name, "-n", NAMESPACE, "-o", "json")
    return str(json.loads(lease.stdout)["spec"].get("holderIdentity") or "") if lease.returncode == 0 else ""


@pytest.mark.asyncio(loop_scope="session")
async def test_topogang_serve_leads_with_only_its_service_accounts_rights(
    control_plane: ControlPlane, installed: Installed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the Deployment runs it, on the ServiceAccount's token: every informer syncs under the
    ClusterRole (a 403 would keep it from syncing), it takes the Lease its Role allows and
    answers /readyz 200 as the leader, labels its own pod (a Pod object standing for it, gated so
    it never runs) as the leader, and removes the label when it stops."""
    await asyncio.to_thread(ok, control_plane, "apply", "-f", "-", stdin=json.dumps(OWN_POD))
    kubeconfig = token_kubeconfig(control_plane, "topogang", tmp_path / "topogang.kubeconfig")
    args = installed.of("Deployment", "topogang")["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in args)
    assert (flags["leader-elect"], flags["lease-name"]) == ("true", "topogang")
    monkeypatch.setenv("TOPOGANG_LEADER_ELECT", flags["leader-elect"])
    monkeypatch.setenv("TOPOGANG_LEASE_NAME", flags["lease-name"])
    monkeypatch.setenv("POD_NAME", "topogang-e2e")  # the downward API's, as in the Deployment
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    try:
        async with Topogang.start(kubeconfig, tmp_path, ready_within=90) as server:
            holder = await asyncio.to_thread(lease_holder, control_plane, "topogang")
            deadline = time.monotonic() + 30
            while (await asyncio.to_thread(own_pod_labels, control_plane)).get(LEADER_LABEL) != "true":
                assert time.monotonic() < deadline, f"its pod was not labelled:\n{server.tail()}"
                await asyncio.sleep(0.2)
        log = server.log_path.read_text()
        labels = await asyncio.to_thread(own_pod_labels, control_plane)
    finally:
        kubectl(control_plane, "delete", "pod", OWN_POD["metadata"]["name"], "-n", NAMESPACE, "--wait=false")
    assert holder == "topogang-e2e"
    assert LEADER_LABEL not in labels  # removed on SIGTERM, before the Lease was released
    # ApiError renders as "<status> <reason>: <message>": a refused request shows "403 Forbidden".
    # (Not a bare "403": the log also carries a random port.)
    assert " 403 " not in log
    assert "forbidden" not in log.lower()


# -- scheduler-config/ -----------------------------------------------------------------------------------


def extender_settings(path: Path) -> dict[str, Any]:
    (extender,) = yaml.safe_load(path.read_text())["extenders"]
    return {k: v for k, v in extender.items() if k != "urlPrefix"}


def without_address(extender: dict[str, Any]) -> dict[str, Any]:
    """An extender's settings but where it is reached: urlPrefix and the TLS server name."""
    tls = {k: v for k, v in extender["tlsConfig"].items() if k != "serverName"}
    return extender | {"urlPrefix": None, "tlsConfig": tls}


def test_the_shipped_scheduler_configs_agree(installed: Installed) -> None:
    shipped = yaml.safe_load(SHIPPED_CONFIG.read_text())
    second = yaml.safe_load(SECOND_SCHEDULER_CONFIG.read_text())
    kubeadm = yaml.safe_load(KUBEADM_CONFIG.read_text())
    for doc in (second, kubeadm):
        assert without_address(doc["extenders"][0]) == without_address(shipped["extenders"][0])
        assert "percentageOfNodesToScore" not in doc  # adaptive, as shipped: planned pods are nominated
    assert "percentageOfNodesToScore" not in shipped
    assert [p["schedulerName"] for p in second["profiles"]] == ["topogang-scheduler"]
    assert [p["schedulerName"] for p in kubeadm["profiles"]] == ["default-scheduler"]
    assert second["extenders"][0]["urlPrefix"] == "https://topogang.topogang-system.svc:8888/topogang"
    # The second scheduler's Lease is the one its Role names; the ConfigMap holds this very file.
    election = second["leaderElection"]
    assert (election["resourceNamespace"], election["resourceName"]) == (NAMESPACE, "topogang-scheduler")
    role = installed.of("Role", "topogang-scheduler-leader-election")
    assert ["topogang-scheduler"] in [r.get("resourceNames") for r in role["rules"]]
    (configmap,) = [d for d in installed.scheduler if d["kind"] == "ConfigMap"]
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == second
    # topogang answers a waiting bind call before kube-scheduler gives up on the HTTP call.
    args = installed.of("Deployment", "topogang")["spec"]["template"]["spec"]["containers"][0]["args"]
    (budget,) = [float(a.split("=", 1)[1]) for a in args if a.startswith("--bind-call-budget=")]
    assert budget < float(shipped["extenders"][0]["httpTimeout"].removesuffix("s"))
    # Its urlPrefix path is the one topogang serves, over HTTPS.
    (prefix,) = [a.split("=", 1)[1] for a in args if a.startswith("--url-prefix=")]
    for doc in (shipped, second, kubeadm):
        assert doc["extenders"][0]["urlPrefix"].startswith("https://")
        assert doc["extenders"][0]["urlPrefix"].endswith(f":8888{prefix}")
        assert doc["extenders"][0]["enableHTTPS"] is True


def mounted_secret(deployment: dict[str, Any], directory: str) -> str:
    """The Secret a Deployment's (only) container has mounted at DIRECTORY."""
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    return str(volume["secret"]["secretName"])


def test_the_certificates_are_the_ones_mounted_and_named(installed: Installed) -> None:
    """tls.yaml's serving certificate is mounted by topogang and names the addresses the
    schedulers verify; its client certificate is mounted where the schedulers' tlsConfig looks;
    both come from the one CA topogang trusts for clients (--client-ca, the Secret's ca.crt)."""
    topogang = installed.of("Deployment", "topogang")
    (container,) = topogang["spec"]["template"]["spec"]["containers"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in container["args"])
    directory = str(Path(flags["tls-cert"]).parent)
    assert {flags["tls-cert"], flags["tls-key"], flags["client-ca"]} == {
        f"{directory}/tls.crt",
        f"{directory}/tls.key",
        f"{directory}/ca.crt",
    }
    serving = installed.of("Certificate", "topogang-serving")["spec"]
    client = installed.of("Certificate", "topogang-scheduler-client")["spec"]
    assert mounted_secret(topogang, directory) == serving["secretName"]
    assert serving["issuerRef"] == client["issuerRef"]
    issuer = installed.of("Issuer", serving["issuerRef"]["name"])["spec"]
    assert installed.of("Certificate", "topogang-ca")["spec"]["secretName"] == issuer["ca"]["secretName"]
    assert "server auth" in serving["usages"]
    assert "client auth" in client["usages"]
    second = yaml.safe_load(SECOND_SCHEDULER_CONFIG.read_text())["extenders"][0]
    kubeadm = yaml.safe_load(KUBEADM_CONFIG.read_text())["extenders"][0]
    assert second["urlPrefix"].removeprefix("https://").split(":")[0] in serving["dnsNames"]
    assert kubeadm["tlsConfig"]["serverName"] in serving["dnsNames"]
    client_dir = str(Path(second["tlsConfig"]["certFile"]).parent)
    assert mounted_secret(installed.of("Deployment", "topogang-scheduler"), client_dir) == client["secretName"]
    assert {second["tlsConfig"][k] for k in ("certFile", "keyFile", "caFile")} == {
        f"{client_dir}/tls.crt",
        f"{client_dir}/tls.key",
        f"{client_dir}/ca.crt",
    }


def with_test_certificates(doc: dict[str, Any], directory: Path) -> dict[str, Any]:
    """DOC with its extender's tlsConfig files replaced by test certificates made in DIRECTORY
    (kube-scheduler reads them at start)."""
    pki = extender_pki(directory)
    doc["extenders"][0]["tlsConfig"].update(
        {"certFile": str(pki.client_cert), "keyFile": str(pki.client_key), "caFile": str(pki.ca)}
    )
    return doc


CONFIGS = [SHIPPED_CONFIG, SECOND_SCHEDULER_CONFIG, KUBEADM_CONFIG]


def load(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.parametrize("config", CONFIGS, ids=[str(p.relative_to(ROOT)) for p in CONFIGS])
async def test_kube_scheduler_starts_healthy_from_each_shipped_config(
    installed: Installed, scheduler: SchedulerSwitch, config: Path, tmp_path: Path
) -> None:
    # The launcher sets only clientConnection.kubeconfig and turns leader election off; the
    # client certificate's files are the test's.
    shipped = with_test_certificates(load(config), tmp_path / "pki")
    written = load(await scheduler.use(shipped))
    assert (written["profiles"], written["extenders"]) == (shipped["profiles"], shipped["extenders"])


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _insecure() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # kube-scheduler's self-signed serving certificate
    return context


@pytest.mark.asyncio(loop_scope="session")
async def test_the_second_scheduler_takes_its_own_lease_with_its_service_accounts_token(
    control_plane: ControlPlane, installed: Installed, tmp_path: Path
) -> None:
    """The shipped config.yaml as the Deployment runs it (leader election on), authenticated as
    the topogang-scheduler ServiceAccount: its RBAC lets it run, delegate authentication and hold
    topogang-system/topogang-scheduler, beside the cluster's own scheduler."""
    kubeconfig = token_kubeconfig(control_plane, "topogang-scheduler", tmp_path / "scheduler.kubeconfig")
    doc = with_test_certificates(load(SECOND_SCHEDULER_CONFIG), tmp_path / "pki")
    doc["clientConnection"]["kubeconfig"] = str(kubeconfig)  # in the cluster: its in-cluster token
    config = write(tmp_path / "config.yaml", yaml.safe_dump(doc))
    (port,) = free_ports(1)

    def ready() -> str | None:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=2, context=_insecure()) as r:
                return None if r.read() == b"ok" else "not ok"
        except (OSError, urllib.error.URLError) as exc:
            return str(exc)

    component = Component(
        "topogang-scheduler",
        [
            str(control_plane.binaries.path("kube-scheduler")),
            f"--config={config}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "-v=2",
        ],
        control_plane.logs_dir / "topogang-scheduler.log",
        probe=ready,
    )
    component.start()
    try:
        await component.wait_healthy_async(60)
        deadline = time.monotonic() + 60
        holder = ""
        while not holder and time.monotonic() < deadline:
            holder = await asyncio.to_thread(lease_holder, control_plane, "topogang-scheduler")
            if not holder:
                await asyncio.sleep(0.5)
        assert holder, f"no holder of {NAMESPACE}/topogang-scheduler:\n{component.tail()}"
        log = component.tail(400)
        assert "forbidden" not in log.lower(), log
    finally:
        component.stop()


# -- e2e/kind ----------------------------------------------------------------------------------------------


def test_the_kind_overlay_pins_the_service_the_kind_scheduler_calls(control_plane: ControlPlane) -> None:
    docs = render(control_plane, KIND)
    (service,) = [d for d in docs if d["kind"] == "Service"]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "topogang:e2e"
    assert service["spec"]["selector"][LEADER_LABEL] == "true"  # the overlay keeps the leader's selector
    script = (KIND / "run.sh").read_text()
    assert "rollout status deployment/topogang" in script  # both replicas become Ready (/synced)
    cluster = yaml.safe_load((KIND / "cluster.yaml").read_text())
    subnet = ipaddress.ip_network(cluster["networking"]["serviceSubnet"])
    assert ipaddress.ip_address(service["spec"]["clusterIP"]) in subnet
    # The kubeadm example uses the same address; kube-scheduler's --config is in the mounted directory.
    kubeadm = yaml.safe_load(KUBEADM_CONFIG.read_text())
    assert kubeadm["extenders"][0]["urlPrefix"] == f"https://{service['spec']['clusterIP']}:8888/topogang"
    (patch,) = [yaml.safe_load(p) for p in cluster["kubeadmConfigPatches"]]
    (arg,) = patch["scheduler"]["extraArgs"]
    (volume,) = patch["scheduler"]["extraVolumes"]
    (mount,) = cluster["nodes"][0]["extraMounts"]
    assert arg["value"].startswith(volume["mountPath"] + "/")
    assert volume["hostPath"] == mount["containerPath"]
    assert f"CONFIG=$CONFIG_DIR/{Path(arg['value']).name}" in script
    assert f"CONFIG_DIR=$STATE/{Path(mount['hostPath']).relative_to('.cache/kind')}" in script
