"""Gates mode in the e2e tests and the bench: manifests/gates/webhook/webhook.yaml registered with the API
server, its clientConfig pointed at a `topogang serve --webhook-listen=127.0.0.1:<port>`.

    await kube.post(WEBHOOKS, webhook_config(name, f"https://127.0.0.1:{port}"))
    Topogang.start(kubeconfig, logs, args=gates_args(name, port))

The configuration has no caBundle: topogang sets it (a self-signed CA for 127.0.0.1), as its
leader does in a cluster; wait for `bundled` before creating pods.
"""

from __future__ import annotations

from typing import Any

import yaml

from e2e.topogang import ROOT
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
