"""Gates mode in the e2e tests and the bench: manifests/gates/webhook/webhook.yaml registered with the API
server, its clientConfig pointed at a `topogang serve --webhook-listen=127.0.0.1:<port>`.

    await kube.post(WEBHOOKS, webhook_config(name, f"https://127.0.0.1:{port}"))
    Topogang.start(kubeconfig, logs, args=gates_args(name, port))

The configuration has no caBundle: topogang sets it (a self-signed CA for 127.0.0.1), as its
leader does in a cluster; wait for `bundled` before creating pods.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane import ControlPlane
from e2e.scenario import eventually, install
from e2e.topogang import CRDS, ROOT, Topogang, _free_port
from extender.kube.client import KubeClient

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
SHIPPED_WEBHOOK = ROOT / "manifests" / "gates" / "webhook" / "webhook.yaml"
ENABLED = {"scheduling.topogang.io/gates": "enabled"}  # the namespace label the webhook selects


def webhook_config(name: str, url: str) -> dict[str, Any]:
    """manifests/gates/webhook/webhook.yaml as shipped, calling URL instead of the in-cluster Service."""
    doc = yaml.safe_load(SHIPPED_WEBHOOK.read_text())
    doc["metadata"]["name"] = name
    for hook in doc["webhooks"]:
        path = hook["clientConfig"]["service"]["path"]
        hook["clientConfig"] = {"url": f"{url}{path}"}
    return dict(doc)


def gates_args(name: str, port: int) -> list[str]:
    return [
        "--mode=gates",
        f"--webhook-listen=127.0.0.1:{port}",
        "--webhook-hosts=127.0.0.1",
        f"--webhook-config={name}",
    ]


async def bundled(kube: KubeClient, name: str) -> bool:
    config = await kube.get(f"{WEBHOOKS}/{name}")
    return all(h["clientConfig"].get("caBundle") for h in config["webhooks"])


@contextlib.asynccontextmanager
async def gates_serving(
    kubeconfig: Path, control_plane: ControlPlane, *objects: Mapping[str, Any]
) -> AsyncIterator[Topogang]:
    """topogang's CRDs and OBJECTS installed, `topogang serve --mode=gates` started with its
    webhook registered (and its caBundle set); the webhook configuration deleted on the way out."""
    name = f"topogang-e2e-{uuid.uuid4().hex[:6]}"
    port = _free_port()
    async with await KubeClient.connect(kubeconfig) as kube:
        await install(kube, CRDS, *objects)
        await kube.post(WEBHOOKS, webhook_config(name, f"https://127.0.0.1:{port}"))
        try:
            async with Topogang.start(kubeconfig, control_plane.logs_dir, args=gates_args(name, port)) as server:
                await eventually(lambda: bundled(kube, name), within=30, what="topogang to set the webhook's caBundle")
                yield server
        finally:
            await kube.delete(f"{WEBHOOKS}/{name}")
