"""apps/v1 Deployment, ReplicaSet and StatefulSet: their pods, as their controllers create them.

No grouper is declared here: the pods of these kinds are grouped by the rule for owners no
grouper knows (`group.py`), and the cluster cache watches their owners as intermediate owners
(`kinds.INTERMEDIATE_OWNERS`). Only the simulator makes their pods:

    Deployment   Deployment -> ReplicaSet <deploy>-<hash> -> Pod <deploy>-<hash>-<suffix>
    ReplicaSet   ReplicaSet -> Pod <rs>-<suffix>
    StatefulSet  StatefulSet -> Pod <sts>-<ordinal>   (ordinals from spec.ordinals.start, default 0)

`spec.replicas` defaults to 1. Each pod has its template's labels and annotations plus the ones
its controller adds (`pod-template-hash`; a StatefulSet's pod-name and pod-index labels and its
revision). <hash> is a hash of the template written in the API server's name alphabet, as the
Deployment controller's is (not the same value: that one hashes Go's printing of the object).
<suffix> is what the API server appends to a ReplicaSet's `generateName` (5 characters of that
alphabet, the prefix cut to 58), derived from the pod's position instead of drawn at random,
so names are stable and never collide within one ReplicaSet.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from extender.grouping import names as n
from extender.grouping.kinds.kind import Synthesizer
from extender.grouping.synthesis import JSON, Synthesis
from extender.grouping.values import count, list_at, mapping_at
from extender.model.errors import FieldError
from extender.model.raw import literal

POD_TEMPLATE_HASH = "pod-template-hash"
REVISION_HASH = "controller-revision-hash"
STS_POD_NAME = "statefulset.kubernetes.io/pod-name"
STS_POD_INDEX = "apps.kubernetes.io/pod-index"
REVISION = "deployment.kubernetes.io/revision"

# The API server's alphabet for generated names: no vowels, so that no word is spelt by chance.
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SUFFIX = 5
MAX_PREFIX = 63 - SUFFIX  # generateName keeps at most this much of the prefix
# i -> (STRIDE * i + offset) mod 27^5 is a bijection (STRIDE is prime to 27): distinct pods of
# one ReplicaSet get distinct suffixes, for far more pods than the limits allow.
STRIDE = 7_368_787
SPACE = len(ALPHABET) ** SUFFIX


def _digest(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("\0".join(parts).encode()).digest()[:8], "big")


def suffix(namespace: str, owner: str, i: int) -> str:
    """The 5 characters after a ReplicaSet's pod prefix, for its i-th pod."""
    value = (STRIDE * i + _digest(namespace, owner)) % SPACE
    out = []
    for _ in range(SUFFIX):
        value, digit = divmod(value, len(ALPHABET))
        out.append(ALPHABET[digit])
    return "".join(reversed(out))  # the digit that moves most first: neighbours do not look alike


def template_hash(template: Mapping[str, Any]) -> str:
    """The pod-template-hash: a 32-bit FNV-1a of the template, its decimal digits mapped to
    ALPHABET (the Deployment controller's encoding of its own hash)."""
    value = 0x811C9DC5
    text = orjson.dumps(template, default=str, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    for byte in text:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(ALPHABET[ord(c) % len(ALPHABET)] for c in str(value))


def _template(out: Synthesis, spec: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    return mapping_at(spec, "template", out.obj, where, out.errors)


def _replica_pods(
    out: Synthesis, rs_name: str, rs_ref: JSON, replicas: int, template: Mapping[str, Any], extra: Mapping[str, str]
) -> None:
    """The pods of one ReplicaSet, named as generateName names them."""
    out.expect(replicas, "spec.replicas")
    prefix = f"{rs_name}-"[:MAX_PREFIX]
    for i in range(replicas):
        out.pod(prefix + suffix(out.namespace, rs_name, i), template, rs_ref, extra)


def synthesize_replicaset(out: Synthesis) -> None:
    replicas = count(out.spec, "replicas", 1, out.obj, "spec", out.errors)
    _replica_pods(out, out.name, out.ref(), replicas, _template(out, out.spec, "spec"), {})


def synthesize_deployment(out: Synthesis) -> None:
    replicas = count(out.spec, "replicas", 1, out.obj, "spec", out.errors)
    template = _template(out, out.spec, "spec")
    pod_hash = template_hash(template)
    rs_name = f"{out.name}-{pod_hash}"
    labels = {**_labels(template), POD_TEMPLATE_HASH: pod_hash}
    rs_template = {**template, "metadata": {**mapping_at(template, "metadata", out.obj, "", []), "labels": labels}}
    selector = mapping_at(out.spec, "selector", out.obj, "spec", out.errors)
    match = {**mapping_at(selector, "matchLabels", out.obj, "spec.selector", out.errors), POD_TEMPLATE_HASH: pod_hash}
    rs_spec = {"replicas": replicas, "selector": {**selector, "matchLabels": match}, "template": rs_template}
    rs_ref = out.owner(n.APPS_V1, "ReplicaSet", rs_name, out.ref(), labels, rs_spec)
    _replica_pods(out, rs_name, rs_ref, replicas, template, {POD_TEMPLATE_HASH: pod_hash})


def synthesize_statefulset(out: Synthesis) -> None:
    replicas = count(out.spec, "replicas", 1, out.obj, "spec", out.errors)
    template = _template(out, out.spec, "spec")
    start = _start_ordinal(out)
    claims = [
        str(c["metadata"]["name"])
        for c in list_at(out.spec, "volumeClaimTemplates", out.obj, "spec", out.errors)
        if isinstance(c, Mapping) and isinstance(c.get("metadata"), Mapping) and c["metadata"].get("name")
    ]
    revision = f"{out.name}-{template_hash(template)}"
    service = out.spec.get("serviceName")
    out.expect(replicas, "spec.replicas")
    ref = out.ref()
    for ordinal in range(start, start + replicas):
        name = f"{out.name}-{ordinal}"
        labels = {REVISION_HASH: revision, STS_POD_NAME: name, STS_POD_INDEX: str(ordinal)}
        body = out.pod(name, template, ref, labels)
        spec: JSON = body["spec"]
        spec["hostname"] = name
        if isinstance(service, str) and service:
            spec["subdomain"] = service
        if claims:  # each pod mounts its own claim of each template, as the controller names them
            volumes = [v for v in spec.get("volumes") or [] if not (isinstance(v, Mapping) and v.get("name") in claims)]
            volumes += [{"name": c, "persistentVolumeClaim": {"claimName": f"{c}-{name}"}} for c in claims]
            spec["volumes"] = volumes


def _start_ordinal(out: Synthesis) -> int:
    """spec.ordinals.start: an int32 >= 0 (not a size: only the replicas count is bounded)."""
    start = mapping_at(out.spec, "ordinals", out.obj, "spec", out.errors).get("start", 0)
    if isinstance(start, int) and not isinstance(start, bool) and 0 <= start < 2**31:
        return start
    out.errors.append(FieldError(out.obj, "spec.ordinals.start", f"expected an integer >= 0, got {literal(start)}"))
    return 0


def _labels(template: Mapping[str, Any]) -> dict[str, str]:
    """The template's labels, as a pod made from it carries them."""
    meta = template.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in labels.items() if v is not None}


SYNTHESIZERS: dict[tuple[str, str], Synthesizer] = {
    (n.APPS_V1, "Deployment"): synthesize_deployment,
    (n.APPS_V1, "ReplicaSet"): synthesize_replicaset,
    (n.APPS_V1, "StatefulSet"): synthesize_statefulset,
}
