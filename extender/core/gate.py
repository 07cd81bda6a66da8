"""The bind gate of one plan: who of the minimum has reached bind, and when the last new one did.

A gang's minimum binds all together, so its members wait at the gate. How long a gang takes to
reach it grows with its size (kube-scheduler handles one pod at a time: 1,024 pods at 70 ms each
need over a minute), so the gate has no deadline for the whole gang; it is bounded by silence
instead: it closes when no *new* member has reached bind for the bind timeout. A member stays
arrived once it has come, even after its bind call was answered with a retryable error (a call
cannot wait longer than kube-scheduler's httpTimeout): it keeps its node, and when the last
member comes every arrived member is bound, whether its call is still waiting or not.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field


@dataclass
class Gate:
    minimum: frozenset[str]  # the pods that must all reach bind before any binds
    arrived: dict[str, str] = field(default_factory=dict)  # pod -> node: reached bind, not bound yet
    # Handed out to bind (its Binding posted or about to be) and not let go yet: until the pod
    # shows up bound, its node is what the Binding names, so it must never be traded.
    binding: set[str] = field(default_factory=set)
    last_arrival: float | None = None  # when a member reached bind for the first time (monotonic)
    opened: bool = False  # the minimum went through
    ahead: bool = False  # opened as planned: every planned pod is being bound (core/binding.py)

    def arrive(self, pod: str, node: str, now: float) -> bool:
        """POD reached bind on NODE; True when it had not arrived before (progress)."""
        new = pod not in self.arrived
        self.arrived[pod] = node
        if new:
            self.last_arrival = now
        return new

    def fixed(self, pod: str) -> bool:
        """Whether POD's planned node may no longer change: it reached bind, or is being bound."""
        return pod in self.arrived or pod in self.binding

    def missing(self, reserved: Collection[str]) -> list[str]:
        """Pods of the minimum still to come (a pod bound already is not waited for)."""
        if self.opened:
            return []
        return sorted(p for p in self.minimum if p in reserved and p not in self.arrived)

    def complete(self, reserved: Collection[str]) -> bool:
        return not any(p in reserved and p not in self.arrived for p in self.minimum)

    def open(self) -> tuple[tuple[str, str], ...]:
        """Let the minimum through: every arrived pod, with its node, to bind now."""
        self.opened = True
        batch = tuple(sorted(self.arrived.items()))
        self.binding.update(self.arrived)
        self.arrived.clear()
        return batch

    def open_all(self, reserved: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """Let every planned pod through at once, whether it reached bind or not (bound ahead of
        kube-scheduler's calls: core/binding.py)."""
        self.opened = self.ahead = True
        self.arrived.clear()
        self.binding.update(reserved)
        return tuple(sorted(reserved.items()))

    def silence_left(self, now: float, timeout: float) -> float | None:
        """Seconds until the gate closes for silence (<= 0: it should close now); None when no
        member is waiting, or the gate opened."""
        if self.opened or self.last_arrival is None or not self.arrived:
            return None
        return self.last_arrival + timeout - now

    def counts(self, reserved: Mapping[str, str]) -> tuple[int, int]:
        """(arrived, total) of the minimum still unbound."""
        total = [p for p in self.minimum if p in reserved]
        return sum(1 for p in total if p in self.arrived), len(total)
