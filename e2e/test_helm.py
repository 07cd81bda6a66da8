"""charts/topogang with the real helm (built from its Go module by build-components.sh).

- `helm lint` for each mode; values.schema.json refuses unknown values and misspelt keys;
- the chart and the kustomize manifests render the same objects: the defaults against
  manifests/, gates mode against manifests/gates/ and manifests/gates/cert-manager/, the second
  scheduler against scheduler-config/second-scheduler/ (the labels Helm and kustomize each add,
  and the hash kustomize puts in a ConfigMap's name, aside);
- `helm template` of each mode applied to the real API server as a server-side dry run;
- `helm install` into the test control plane (self-generated certificates, the second scheduler,
  the metrics Service), the objects checked, `helm upgrade` keeping the certificates, and the
  ServiceAccount allowed what topogang does and not more.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from e2e.controlplane import ControlPlane
from e2e.controlplane.components import Components
from e2e.test_manifests import CERT_MANAGER_CRDS, FIELD_MANAGER, dump, kubectl, ok, render

pytestmark = [pytest.mark.controlplane, pytest.mark.controlplane_only]

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "topogang"
NAMESPACE = "topogang-system"
RELEASE_NAMESPACE = "topogang-helm"
# Labels only one of the two tools sets (Helm's release labels; kustomize's labels: blocks, which
# do not reach the objects of a component or an overlay).
TOOL_LABELS = {
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/name",
    "app.kubernetes.io/part-of",
    "helm.sh/chart",
}
MODES = {
    "extender": [],
    "gates": ["--set", "mode=gates"],
    "gates-cert-manager": ["--set", "mode=gates", "--set", "certificates.webhookFromCertManager=true"],
    "self-generated": ["--set", "certificates.source=self-generated"],
    "second-scheduler": ["--set", "secondScheduler.enabled=true"],
    "metrics": ["--set", "metrics.service.enabled=true"],
}


@pytest.fixture(scope="module")
def helm_bin() -> Path:
    return Components.locate().path("helm")


def helm(helm_bin: Path, *args: str, plane: ControlPlane | None = None) -> subprocess.CompletedProcess[str]:
    cluster = ["--kubeconfig", str(plane.kubeconfig)] if plane is not None else []
    return subprocess.run(
        [str(helm_bin), *args, *cluster], capture_output=True, text=True, timeout=180, check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path(tempfile.gettempdir()) / "topogang-helm-home")},
    )  # fmt: skip


def template(helm_bin: Path, *values: str, namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    done = helm(helm_bin, "template", "topogang", str(CHART), "--namespace", namespace, "--include-crds", *values)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _labels(meta: dict[str, Any]) -> None:
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in TOOL_LABELS}
    meta.pop("labels", None)
    if labels:
        meta["labels"] = labels
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith("checksum/")}
    meta.pop("annotations", None)
    if annotations:
        meta["annotations"] = annotations


def _spaces(value: Any) -> Any:
    """Runs of whitespace in strings as one space: kustomize writes a folded CEL rule with a
    more-indented line back with an extra newline (the same rule)."""
    if isinstance(value, str):
        return " ".join(value.split())
    if isinstance(value, list):
        return [_spaces(v) for v in value]
    if isinstance(value, dict):
        return {k: _spaces(v) for k, v in value.items()}
    return value


def normal(doc: dict[str, Any]) -> dict[str, Any]:
    d = copy.deepcopy(doc)
    _labels(d["metadata"])
    if d["kind"] == "CustomResourceDefinition":
        d["spec"] = _spaces(d["spec"])
    if d["kind"] == "ConfigMap":
        d["metadata"]["name"] = re.sub(r"-[a-z0-9]{10}$", "", d["metadata"]["name"])
        d["data"] = {k: yaml.safe_load(v) for k, v in d["data"].items()}
    if d["kind"] == "Deployment":
        pod = d["spec"]["template"]
        _labels(pod["metadata"])
        for volume in pod["spec"].get("volumes", []):
            if "configMap" in volume:
                volume["configMap"]["name"] = re.sub(r"-[a-z0-9]{10}$", "", volume["configMap"]["name"])
    return d


def by_key(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    normalized = [normal(d) for d in docs if d["kind"] != "Namespace"]
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in normalized}


# -- lint and schema -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
def test_helm_lint_passes_in_each_mode(helm_bin: Path, mode: str) -> None:
    done = helm(helm_bin, "lint", "--strict", str(CHART), *MODES[mode])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (["--set", "mode=scheduler"], "mode"),
        (["--set", "replica=3"], "replica"),
        (["--set", "certificates.source=vault"], "source"),
        (["--set", "secondScheduler.enabled=true", "--set", "mode=gates"], "secondScheduler.enabled is for mode"),
        (["--set", "metrics.serviceMonitor.enabled=true"], "needs metrics.service.enabled"),
        (["--set", "server.maxWait=45"], "maxWait"),
    ],
    ids=[
        "unknown-mode",
        "misspelt-key",
        "unknown-certificate-source",
        "second-scheduler-in-gates",
        "monitor-alone",
        "max-wait-without-unit",
    ],
)
def test_the_chart_refuses_wrong_values_with_a_message(helm_bin: Path, values: list[str], says: str) -> None:
    done = helm(helm_bin, "template", "topogang", str(CHART), *values)
    assert done.returncode != 0
    assert says in done.stderr, done.stderr


# -- the chart and the kustomize manifests do not drift apart ----------------------------------------------------


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ([], "manifests"),
        (["--set", "mode=gates"], "manifests/gates"),
        (["--set", "mode=gates", "--set", "certificates.webhookFromCertManager=true"], "manifests/gates/cert-manager"),
    ],
    ids=["extender", "gates", "gates-cert-manager"],
)
def test_the_chart_renders_the_objects_the_kustomize_manifests_do(
    control_plane: ControlPlane, helm_bin: Path, values: list[str], path: str
) -> None:
    chart = by_key(template(helm_bin, *values))
    kustomize = by_key(render(control_plane, ROOT / path))
    assert sorted(chart) == sorted(kustomize)
    for key, doc in kustomize.items():
        assert chart[key] == doc, f"{key} differs"


def test_a_maximum_wait_reaches_the_servers_flags(helm_bin: Path) -> None:
    def args(*values: str) -> list[str]:
        (found,) = [
            d for d in template(helm_bin, *values) if d["kind"] == "Deployment" and d["metadata"]["name"] == "topogang"
        ]
        return list(found["spec"]["template"]["spec"]["containers"][0]["args"])

    assert "--max-wait=2h" in args("--set", "server.maxWait=2h")
    assert not any(a.startswith("--max-wait") for a in args())


def test_the_charts_second_scheduler_is_scheduler_config_second_scheduler(
    control_plane: ControlPlane, helm_bin: Path
) -> None:
    base = by_key(template(helm_bin))
    chart = {k: v for k, v in by_key(template(helm_bin, *MODES["second-scheduler"])).items() if k not in base}
    kustomize = by_key(render(control_plane, ROOT / "scheduler-config" / "second-scheduler"))
    assert sorted(chart) == sorted(kustomize)
    for key, doc in kustomize.items():
        assert chart[key] == doc, f"{key} differs"


# -- the API server accepts every mode ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def apis(control_plane: ControlPlane) -> None:
    """cert-manager's CRDs (the chart's Issuers and Certificates are checked against them) and
    topogang's, and the release's namespace."""
    for crd in CERT_MANAGER_CRDS:
        ok(control_plane, "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
           "-f", str(crd))  # fmt: skip
    for crd in sorted((CHART / "crds").glob("*.yaml")):
        ok(control_plane, "apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}",
           "-f", str(crd))  # fmt: skip
    ok(control_plane, "wait", "--for=condition=Established", "--timeout=60s", "crd/certificates.cert-manager.io",
       "crd/issuers.cert-manager.io", "crd/podgroups.scheduling.topogang.io")  # fmt: skip


@pytest.mark.parametrize("mode", [*sorted(set(MODES) - {"extender"}), "extender"])
def test_each_mode_is_accepted_by_the_api_server_as_a_server_side_dry_run(
    control_plane: ControlPlane, helm_bin: Path, apis: None, mode: str
) -> None:
    docs = [d for d in template(helm_bin, *MODES[mode]) if d["kind"] != "CustomResourceDefinition"]
    kubectl(control_plane, "create", "namespace", NAMESPACE)  # exists already: fine
    done = kubectl(
        control_plane, "apply", "--server-side", "--dry-run=server", f"--field-manager={FIELD_MANAGER}", "-f", "-",
        stdin=dump(docs),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "deployment.apps/topogang serverside-applied (server dry run)" in done.stdout


# -- helm install into the test control plane --------------------------------------------------------------------


@pytest.fixture(scope="module")
def release(control_plane: ControlPlane, helm_bin: Path, apis: None) -> Iterator[str]:
    values = [
        *MODES["self-generated"], *MODES["second-scheduler"], *MODES["metrics"],
        "--set", "replicas=3", "--set", "image.repository=registry.example/topogang",
    ]  # fmt: skip
    done = helm(
        helm_bin, "install", "topogang", str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
        "--take-ownership", *values, plane=control_plane,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        yield RELEASE_NAMESPACE
    finally:
        helm(helm_bin, "uninstall", "topogang", "--namespace", RELEASE_NAMESPACE, "--wait", plane=control_plane)
        kubectl(control_plane, "delete", "namespace", RELEASE_NAMESPACE, "--ignore-not-found", "--wait=false")


def get(plane: ControlPlane, *args: str) -> dict[str, Any]:
    return dict(json.loads(ok(plane, "get", "-o", "json", *args)))


def certificate(secret: dict[str, Any], key: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(secret["data"][key]))


def test_helm_install_makes_the_objects_with_self_generated_certificates(
    control_plane: ControlPlane, release: str
) -> None:
    deployment = get(control_plane, "-n", release, "deployment", "topogang")
    assert deployment["spec"]["replicas"] == 3
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/topogang:0.1.0"
    assert "--webhook-listen=0.0.0.0:9443" not in container["args"]  # extender mode
    assert get(control_plane, "-n", release, "service", "topogang")["spec"]["selector"] == {
        "app.kubernetes.io/name": "topogang",
        "app.kubernetes.io/component": "extender",
        "scheduling.topogang.io/leader": "true",
    }
    metrics = get(control_plane, "-n", release, "service", "topogang-metrics")
    assert metrics["spec"]["ports"][0]["targetPort"] == "health"
    # The second scheduler calls the Service in the release's namespace.
    config = yaml.safe_load(
        get(control_plane, "-n", release, "configmap", "topogang-scheduler-config")["data"]["config.yaml"]
    )
    assert config["extenders"][0]["urlPrefix"] == f"https://topogang.{release}.svc:8888/topogang"
    assert config["leaderElection"]["resourceNamespace"] == release
    # One CA signs the serving certificate (for the Service's names) and the client certificate.
    serving = get(control_plane, "-n", release, "secret", "topogang-serving")
    client = get(control_plane, "-n", release, "secret", "topogang-scheduler-client")
    ca = certificate(serving, "ca.crt")
    assert certificate(client, "ca.crt") == ca
    for leaf in (certificate(serving, "tls.crt"), certificate(client, "tls.crt")):
        leaf.verify_directly_issued_by(ca)
    names = certificate(serving, "tls.crt").extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert f"topogang.{release}.svc" in names.value.get_values_for_type(x509.DNSName)
    usages = certificate(client, "tls.crt").extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in list(usages)


def test_helm_upgrade_keeps_the_certificates(control_plane: ControlPlane, helm_bin: Path, release: str) -> None:
    before = get(control_plane, "-n", release, "secret", "topogang-serving")["data"]
    done = helm(
        helm_bin, "upgrade", "topogang", str(CHART), "--namespace", release, "--reuse-values",
        "--set", "replicas=2", plane=control_plane,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert get(control_plane, "-n", release, "secret", "topogang-serving")["data"] == before
    assert get(control_plane, "-n", release, "deployment", "topogang")["spec"]["replicas"] == 2


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        ("create", "pods/binding", True),
        ("patch", "pods", True),
        ("watch", "nodes", True),
        ("patch", "podgroups.scheduling.topogang.io/status", True),
        ("get", "secrets", False),
        ("delete", "pods", False),
        ("update", "nodes", False),
    ],
)
def test_the_installed_service_account_may_do_what_topogang_does_and_no_more(
    control_plane: ControlPlane, release: str, verb: str, resource: str, allowed: bool
) -> None:
    kind, _, sub = resource.partition("/")
    subresource = [f"--subresource={sub}"] if sub else []
    done = kubectl(
        control_plane, "auth", "can-i", verb, kind, *subresource, f"--as=system:serviceaccount:{release}:topogang"
    )
    assert done.stdout.strip() == ("yes" if allowed else "no"), done.stdout + done.stderr
