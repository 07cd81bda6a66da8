"""The real workload controllers and Kueue as processes against the local control plane.

    async with Controllers.start(plane, kube, {"jobset", "lws", "training-operator", "kueue"}) as running:
        ...   # create a JobSet, an LWS, a TFJob, a Job with a queue-name label: the controllers act

Each controller is the binary build-components.sh built from its Go module (versions in
e2e/controlplane/versions.env), run under the admin kubeconfig with leader election off, its
metrics off and its health endpoint on a free loopback port. Its CRDs (from its own module) are
applied server-side, replacing the stand-ins of e2e/crds/ that other modules installed.

Webhooks. The API server calls webhooks by URL here, so each webhook configuration the module
ships (config/.../webhook/manifests.yaml) is applied with `clientConfig.url:
https://127.0.0.1:<port><path>` and the CA of a certificate this harness makes for 127.0.0.1
(e2e/controlplane/pki.py); the controller serves with that certificate (its own certificate
management turned off). Every entry gets a namespaceSelector on the label NAMESPACE_LABEL, so
only the namespaces of the tests that asked for controllers go through them, and the
configurations are deleted before the processes stop (a stopped webhook with failurePolicy Fail
would refuse every later Job or pod). What each one serves:
- JobSet: its JobSet defaulting/validation and pod webhooks, as shipped.
- LeaderWorkerSet: its LWS webhooks and the pod webhook that sets the worker-index, group-index
  and subgroup labels, as shipped.
- Kueue: the webhooks of its own kinds and of batch/v1 Job (the `batch/job` integration, the only
  one enabled): a Job with a queue-name label is suspended at creation. Kueue runs with its own
  certificate management on, as its default install does (off, it reads a metrics certificate
  from a fixed system directory). Its rotator finds in its Secret a CA and a certificate the
  harness made in the shape it keeps (valid for its Service name and for 127.0.0.1), checks
  that certificate's files are in its webhook certDir (this run's directory), and writes the CA
  into the conversion webhooks of its CRDs, which call it by URL as its install's do.
- Kubeflow Trainer: its TrainJob defaulting and TrainJob/runtime validation webhooks, as
  shipped. Its certificate management is off; its webhook server reads the harness's pair from
  controller-runtime's default directory under the temporary directory, and the process's
  TMPDIR is a directory of this run (workdir/trainer-tmp), not the system's. It makes JobSets:
  start "jobset" before it.
- training operator: its one webhook only validates TFJob/PyTorchJob specs; it is not
  registered. The operator's certificate rotator still runs (it cannot be turned off) against an
  empty Secret and an empty ValidatingWebhookConfiguration of the names it expects, and waits for
  the Secret's files in a directory fixed in its code under /tmp. So the operator runs in a mount
  namespace of its own (inside a user namespace: no root needed) where /tmp is a directory of
  this run, and the harness writes the Secret's files there, as the kubelet's Secret volume
  would.

Every file the harness and the controllers write is under the control plane's work directory:
nothing needs root, and runs side by side do not share a path.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import shutil
import socket
import ssl
import subprocess
import urllib.request
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.controller_certs import (
    NO_CONVERSION_PATCH,
    Conversion,
    kueue_certificates,
    with_private_tmp,
)
from e2e.controlplane import Component, ControlPlane
from e2e.controlplane.components import Components
from e2e.controlplane.pki import make_pki
from e2e.scenario import eventually
from extender.kube.client import ApiError, KubeClient

NAMESPACE_LABEL = "e2e.topogang.io/controllers"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
KUEUE_NAMESPACE = "kueue-system"
TRAINING_NAMESPACE = "kubeflow"
TRAINING_WEBHOOK = "validator.training-operator.kubeflow.org"
# The names Kueue's certificate rotator checks (its pkg/util/cert and configuration defaults):
# the CA's name, the Service name the serving certificate must be valid for, the Secret.
KUEUE_CA_NAME = "kueue-ca"
KUEUE_SERVICE_DNS = f"kueue-webhook-service.{KUEUE_NAMESPACE}.svc"
KUEUE_CERT_SECRET = "kueue-webhook-server-cert"
# The CRDs Kueue converts with its webhook (its config/components/crd patches); its rotator
# waits until it has written its CA into each.
KUEUE_CONVERTED_CRDS = tuple(
    f"{plural}.kueue.x-k8s.io"
    for plural in ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
)
# The training operator's certificate directory below the /tmp it sees (a constant in its pkg/cert).
TRAINING_CERT_SUBDIR = Path("k8s-webhook-server/serving-certs")
ALL = ("jobset", "lws", "training-operator", "kueue", "trainer")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Running:
    name: str
    component: Component
    health_port: int
    webhook_port: int | None
    webhook_configs: list[tuple[str, str]] = field(default_factory=list)  # (plural, name)
    converted_crds: tuple[str, ...] = ()  # CRDs whose conversion calls this controller


def _health_probe(health_port: int, webhook_port: int | None) -> Callable[[], str | None]:
    def probe() -> str | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/readyz", timeout=2) as resp:
                if resp.status != 200:
                    return f"/readyz {resp.status}"
        except OSError as exc:
            return f"/readyz: {exc}"
        if webhook_port is not None:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            try:
                with (
                    socket.create_connection(("127.0.0.1", webhook_port), timeout=2) as raw,
                    context.wrap_socket(raw),
                ):
                    pass
            except OSError as exc:
                return f"webhook port {webhook_port}: {exc}"
        return None

    return probe


def webhook_configurations(
    manifest: Path, prefix: str, port: int, ca_bundle: str, keep: Callable[[str], bool], pod_selector: str | None
) -> list[dict[str, Any]]:
    """The module's webhook configurations, renamed PREFIX-<kind>, with the entries whose path
    KEEP accepts, each calling https://127.0.0.1:PORT<path> and limited to labelled namespaces.
    POD_SELECTOR: the label key the module's kustomize patch requires on pods (objectSelector
    Exists) for its pod entries."""
    out = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc:
            continue
        webhooks = []
        for entry in doc.get("webhooks") or []:
            path = entry["clientConfig"]["service"]["path"]
            if not keep(path):
                continue
            entry = copy.deepcopy(entry)  # noqa: PLW2901 (the module's own entry stays as it was)
            entry["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}
            entry["namespaceSelector"] = {"matchExpressions": [{"key": NAMESPACE_LABEL, "operator": "Exists"}]}
            if pod_selector is not None and path.endswith("-v1-pod"):
                entry["objectSelector"] = {"matchExpressions": [{"key": pod_selector, "operator": "Exists"}]}
            webhooks.append(entry)
        if webhooks:
            kind = str(doc["kind"])
            name = f"{prefix}-{'mutating' if kind.startswith('Mutating') else 'validating'}"
            out.append({**doc, "metadata": {"name": name}, "webhooks": webhooks})
    return out


class Controllers:
    def __init__(self, plane: ControlPlane, kube: KubeClient, built: Components, workdir: Path) -> None:
        self.plane = plane
        self.kube = kube
        self.built = built
        self.workdir = workdir
        self.running: dict[str, Running] = {}
        pki = make_pki(workdir / "webhook-pki", {}, days=2)
        self.ca_bundle = base64.b64encode(pki.ca.cert.read_bytes()).decode()
        self.cert_dir = workdir / "webhook-certs"
        self.training_tmp = workdir / "training-operator-tmp"
        self.cert_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(pki.serving.cert, self.cert_dir / "tls.crt")
        shutil.copy(pki.serving.key, self.cert_dir / "tls.key")

    def versions(self) -> dict[str, str]:
        return self.built.stamp()

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(self.plane.kubectl), "--kubeconfig", str(self.plane.kubeconfig), *args],
            input=stdin, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {done.stderr}")
        return done.stdout

    def apply(self, docs: list[dict[str, Any]]) -> None:
        """Server-side apply, taking over fields another manager set (the CRD stand-ins)."""
        if docs:
            self.kubectl(
                "apply", "--server-side", "--force-conflicts", "--field-manager=e2e-controllers", "-f", "-",
                stdin="\n---\n".join(json.dumps(d) for d in docs),
            )  # fmt: skip

    async def install_crds(self, name: str, conversion: Conversion | None = None) -> None:
        """The component's CRDs, those CONVERSION names converted by its webhook."""
        docs = [d for p in self.built.crds(name) for d in yaml.safe_load_all(p.read_text()) if d]
        if conversion is not None:
            docs = [conversion.apply(d) for d in docs]
        for doc in docs:
            doc.pop("status", None)
            await self._replace_stand_in(doc)
        self.apply(docs)
        names = [d["metadata"]["name"] for d in docs]

        async def established() -> bool:
            for crd_name in names:
                crd = await self.kube.get(f"{CRD_PATH}/{crd_name}")
                conds = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
                if conds.get("Established") != "True":
                    return False
            return True

        await eventually(established, within=60, what=f"{name}'s CRDs to be established")

    async def _replace_stand_in(self, crd: Mapping[str, Any]) -> None:
        """Delete the CRD of the same name a stand-in installed (e2e/crds) when the real one
        lacks a version the stand-in stored: the API server refuses such an update (MPIJob's
        stand-in stores kubeflow.org/v2beta1, the training operator serves v1 only)."""
        path = f"{CRD_PATH}/{crd['metadata']['name']}"
        try:
            current = await self.kube.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return
            raise
        stored = set((current.get("status") or {}).get("storedVersions") or ())
        served = {v.get("name") for v in crd.get("spec", {}).get("versions", ())}
        if stored <= served:
            return
        await self.kube.delete(path)

        async def gone() -> bool:
            try:
                await self.kube.get(path)
            except ApiError as exc:
                return exc.status == 404
            return False

        await eventually(gone, within=60, what=f"the stand-in CRD {crd['metadata']['name']} to be deleted")

    async def ensure_namespace(self, name: str) -> None:
        try:
            await self.kube.post(
                "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        except ApiError as exc:
            if exc.status != 409:
                raise

    def _config_file(self, name: str, doc: Mapping[str, Any]) -> Path:
        path = self.workdir / f"{name}-config.yaml"
        path.write_text(yaml.safe_dump(dict(doc)))
        return path

    def _controller_runtime_config(
        self, api_version: str, health: int, webhook: int | None, cert_dir: Path | None = None
    ) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "apiVersion": api_version,
            "kind": "Configuration",
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
            "metrics": {"bindAddress": "0"},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        }
        if webhook is not None:
            doc["webhook"] = {"port": webhook, "host": "127.0.0.1", "certDir": str(cert_dir or self.cert_dir)}
        return doc

    async def start_one(self, name: str) -> Running:
        health, webhook = _free_port(), _free_port()
        env = {"KUBECONFIG": str(self.plane.kubeconfig), "PATH": "/usr/bin:/bin", "HOME": str(self.workdir)}
        webhooks: list[dict[str, Any]] = []
        conversion: Conversion | None = None
        if name == "jobset":
            config = self._controller_runtime_config("config.jobset.x-k8s.io/v1alpha1", health, webhook)
            argv = [str(self.built.path("jobset-controller")), f"--config={self._config_file(name, config)}"]
            webhooks = webhook_configurations(
                self.built.webhooks("jobset"), "e2e-jobset", webhook, self.ca_bundle,
                keep=lambda p: True, pod_selector="jobset.sigs.k8s.io/jobset-name",
            )  # fmt: skip
        elif name == "lws":
            config = self._controller_runtime_config("config.lws.x-k8s.io/v1alpha1", health, webhook)
            argv = [str(self.built.path("lws-controller")), f"--config={self._config_file(name, config)}"]
            webhooks = webhook_configurations(
                self.built.webhooks("lws"), "e2e-lws", webhook, self.ca_bundle,
                keep=lambda p: "disaggregatedset" not in p, pod_selector="leaderworkerset.sigs.k8s.io/name",
            )  # fmt: skip
        elif name == "kueue":
            await self.ensure_namespace(KUEUE_NAMESPACE)
            certs = await asyncio.to_thread(
                kueue_certificates, self.workdir / "kueue", namespace=KUEUE_NAMESPACE,
                secret_name=KUEUE_CERT_SECRET, ca_name=KUEUE_CA_NAME, dns_name=KUEUE_SERVICE_DNS,
            )  # fmt: skip
            await self._replace(f"/api/v1/namespaces/{KUEUE_NAMESPACE}/secrets", certs.secret)
            config = self._controller_runtime_config("config.kueue.x-k8s.io/v1beta2", health, webhook, certs.cert_dir)
            config.update(
                internalCertManagement={"enable": True},
                namespace=KUEUE_NAMESPACE,
                manageJobsWithoutQueueName=False,
                integrations={"frameworks": ["batch/job"]},
            )
            argv = [
                str(self.built.path("kueue")),
                f"--config={self._config_file(name, config)}",
                "--feature-gates=VisibilityOnDemand=false,TASMultiLayerTopology=true",
                f"--visibility-server-port={_free_port()}",
            ]
            webhooks = webhook_configurations(
                self.built.webhooks("kueue"), "e2e-kueue", webhook, certs.ca_bundle,
                keep=lambda p: "batch-v1-job" in p or "kueue-x-k8s-io" in p, pod_selector=None,
            )  # fmt: skip
            conversion = Conversion(KUEUE_CONVERTED_CRDS, f"https://127.0.0.1:{webhook}/convert", certs.ca_bundle)
        elif name == "trainer":
            config = self._controller_runtime_config("config.trainer.kubeflow.org/v1alpha1", health, webhook)
            config["webhook"] = {"port": webhook, "host": "127.0.0.1"}  # its certificates: TMPDIR below
            config["certManagement"] = config.pop("internalCertManagement")
            env["TMPDIR"] = str(await asyncio.to_thread(self._trainer_tmpdir))
            argv = [str(self.built.path("trainer-controller-manager")), f"--config={self._config_file(name, config)}"]
            webhooks = webhook_configurations(
                self.built.webhooks("trainer"), "e2e-trainer", webhook, self.ca_bundle,
                keep=lambda p: True, pod_selector=None,
            )  # fmt: skip
        elif name == "training-operator":
            await self.ensure_namespace(TRAINING_NAMESPACE)
            await self._training_operator_cert_objects()
            self.training_tmp.mkdir(parents=True, exist_ok=True)
            shutil.copy(self.plane.kubeconfig, self.training_tmp / "kubeconfig")
            # Inside its namespace the operator's /tmp is self.training_tmp.
            env.update(MY_POD_NAMESPACE=TRAINING_NAMESPACE, KUBECONFIG="/tmp/kubeconfig", HOME="/tmp")
            argv = with_private_tmp(self.training_tmp, self.built.path("training-operator"), [
                "--enable-scheme=tfjob",
                "--enable-scheme=pytorchjob",
                "--metrics-bind-address=0",
                f"--health-probe-bind-address=127.0.0.1:{health}",
                f"--webhook-server-port={webhook}",
            ])  # fmt: skip
            webhook = 0  # served, not registered: no probe of its port
        else:
            raise ValueError(f"unknown controller {name!r}; one of {', '.join(ALL)}")
        await self.install_crds(name, conversion)
        component = Component(
            name, argv, self.plane.logs_dir / f"{name}.log",
            probe=_health_probe(health, webhook or None), cwd=self.workdir, env=env,
        )  # fmt: skip
        running = Running(
            name, component, health, webhook or None, converted_crds=conversion.crds if conversion else ()
        )
        self.running[name] = running
        component.start()
        if name == "training-operator":
            await self._mount_training_operator_certificate(component)
        await component.wait_healthy_async(120)
        self.apply(webhooks)
        running.webhook_configs = [(f"{d['kind'].lower()}s", d["metadata"]["name"]) for d in webhooks]
        return running

    async def _training_operator_cert_objects(self) -> None:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "training-operator-webhook-cert", "namespace": TRAINING_NAMESPACE},
        }
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": TRAINING_WEBHOOK},
            "webhooks": [],
        }
        for path, body in (
            (f"/api/v1/namespaces/{TRAINING_NAMESPACE}/secrets", secret),
            ("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", config),
        ):
            try:
                await self.kube.post(path, body)
            except ApiError as exc:
                if exc.status != 409:
                    raise

    def _trainer_tmpdir(self) -> Path:
        """Trainer's webhook server reads its certificate from controller-runtime's default,
        <TMPDIR>/k8s-webhook-server/serving-certs (its configuration has no certDir): the harness's
        pair goes there, under a temporary directory of this run only."""
        tmpdir = self.workdir / "trainer-tmp"
        certs = tmpdir / "k8s-webhook-server" / "serving-certs"
        certs.mkdir(parents=True, exist_ok=True)
        for key in ("tls.crt", "tls.key"):
            shutil.copy(self.cert_dir / key, certs / key)
        return tmpdir

    async def _replace(self, collection: str, body: Mapping[str, Any]) -> None:
        """Creates BODY in COLLECTION, or replaces the object of its name (an earlier start's)."""
        try:
            await self.kube.post(collection, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            await self.kube.put(f"{collection}/{body['metadata']['name']}", body)

    async def _mount_training_operator_certificate(self, component: Component) -> None:
        """What the kubelet's Secret volume does in a cluster: the operator's certificate rotator
        fills the Secret and waits for the files to appear in its certificate directory (fixed
        under /tmp in its code; its /tmp is self.training_tmp)."""
        path = f"/api/v1/namespaces/{TRAINING_NAMESPACE}/secrets/training-operator-webhook-cert"

        async def filled() -> dict[str, str] | None:
            component.check_alive()
            data = (await self.kube.get(path)).get("data") or {}
            return data if "tls.crt" in data and "tls.key" in data else None

        data = await eventually(filled, within=60, what="the training operator's certificate Secret to be filled")

        def write() -> None:
            cert_dir = self.training_tmp / TRAINING_CERT_SUBDIR
            cert_dir.mkdir(parents=True, exist_ok=True)
            for key in ("tls.crt", "tls.key", "ca.crt"):
                if key in data:
                    (cert_dir / key).write_bytes(base64.b64decode(data[key]))

        await asyncio.to_thread(write)

    async def stop(self) -> None:
        for running in self.running.values():
            for plural, name in running.webhook_configs:
                with contextlib.suppress(ApiError):
                    await self.kube.delete(f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}")
            for crd in running.converted_crds:  # no conversion calls to a stopped process
                with contextlib.suppress(ApiError):
                    await self.kube.patch(f"{CRD_PATH}/{crd}", NO_CONVERSION_PATCH)
        for running in self.running.values():
            running.component.stop()
        self.running.clear()

    def tails(self, lines: int = 20) -> str:
        return "\n".join(
            f"--- last lines of {r.component.log_path} ---\n{r.component.tail(lines)}" for r in self.running.values()
        )

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls, plane: ControlPlane, kube: KubeClient, names: Collection[str] = ALL
    ) -> AsyncIterator[Controllers]:
        built = Components.locate()
        workdir = plane.workdir / "controllers"
        workdir.mkdir(parents=True, exist_ok=True)
        controllers = cls(plane, kube, built, workdir)
        try:
            for name in names:
                await controllers.start_one(name)
            yield controllers
        finally:
            await controllers.stop()


def controlled_namespace_label() -> dict[str, str]:
    """The label a test namespace needs for the controllers' webhooks to see its objects."""
    return {NAMESPACE_LABEL: "true"}


WORKLOAD_COLLECTIONS = (
    "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs",  # first: Trainer remakes a JobSet it owns
    "/apis/batch/v1/namespaces/{ns}/jobs",
    "/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs",
    "/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs",
    "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets",
    "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
)


async def delete_workloads(kube: KubeClient, namespace: str, within: float = 60.0) -> None:
    """Delete NAMESPACE's workloads, then its pods, and wait until no pod is left. Left to the
    namespace's deletion, a controller recreates the pods the test fixture deletes, and those
    pending pods (same topology labels, same Topology) would be placed on the next test's nodes."""
    for template in WORKLOAD_COLLECTIONS:
        with contextlib.suppress(ApiError):  # a kind whose CRD this module did not install
            await kube.delete(template.format(ns=namespace), {"propagationPolicy": "Background"})

    async def no_pods() -> bool:
        listing = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
        if not listing.get("items"):
            return True
        await kube.delete(f"/api/v1/namespaces/{namespace}/pods", {"gracePeriodSeconds": "0"})
        return False

    await eventually(no_pods, within=within, what=f"the pods of {namespace} to be gone with their workloads")
