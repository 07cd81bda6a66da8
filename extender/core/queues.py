"""PodGroup spec.queue (KAI's hierarchical PodGroup design) against the queues the cluster has.

A queue is KAI-Scheduler's cluster-scoped `scheduling.run.ai` Queue, or Kueue's LocalQueue in
the PodGroup's namespace, whichever of their APIs is installed. A queue that no installed API
holds keeps the gang pending (QueueNotFound); when neither API is installed, the field cannot
be checked and is ignored with a warning.
"""

from __future__ import annotations

from collections.abc import Set

KAI_QUEUE = "scheduling.run.ai/Queue"
KUEUE_LOCAL_QUEUE = "kueue.x-k8s.io/LocalQueue"
QUEUE_KINDS = (KAI_QUEUE, KUEUE_LOCAL_QUEUE)
# The CustomResourceDefinitions that install them (the simulator reads these from its input).
QUEUE_CRDS = {"queues.scheduling.run.ai": KAI_QUEUE, "localqueues.kueue.x-k8s.io": KUEUE_LOCAL_QUEUE}

QueueKey = tuple[str, str, str]  # (kind, namespace or "" for KAI's, name)


def queue_problem(
    queue: str, namespace: str, installed: Set[str], queues: Set[QueueKey]
) -> tuple[str | None, str | None]:
    """(why the gang must wait, or None; a warning, or None) for a PodGroup naming `queue`."""
    if not queue:
        return None, None
    if not installed:
        return None, f"spec.queue {queue!r} ignored: neither KAI's Queue nor Kueue's LocalQueue API is installed"
    if (KAI_QUEUE, "", queue) in queues or (KUEUE_LOCAL_QUEUE, namespace, queue) in queues:
        return None, None
    looked = []
    if KAI_QUEUE in installed:
        looked.append("no Queue (scheduling.run.ai)")
    if KUEUE_LOCAL_QUEUE in installed:
        looked.append(f"no LocalQueue in namespace {namespace}")
    return f"spec.queue {queue!r} does not exist: {' and '.join(looked)} has that name", None
