"""The order in which kube-scheduler's queue (PrioritySort) meets pending gangs.

Higher priority first, then older, then the order read. The simulator sorts pods with it (a
gang's members take the gang's priority and age, so gangs come one after another) and the trace
benchmark sorts its pending gangs with it, so both replay the order the server sees.
"""

from __future__ import annotations


def queue_key(priority: int, created: float | None, seq: int) -> tuple[int, float, int]:
    """Sort key: ascending order is the order the queue hands pods out."""
    return (-priority, created if created is not None else 0.0, seq)
