"""Room held for a waiting gang, as its status tells it (core/reservations.py decides it), and the
two ways a moment is written: a wall-clock time, or a delay after the last reservation pass."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from extender.placement import DomainRef


@dataclass(frozen=True)
class ReservedRoom:
    """Room held for a waiting gang (core/reservations.py): where, and when it should start."""

    domain: DomainRef
    nodes: int
    start: float | None  # estimated start, wall-clock seconds; None: no wall clock is known
    made: float | None  # when the reservation was made, wall-clock seconds; None: not known
    after: float = 0.0  # seconds from the last reservation pass to the estimated start
    overdue: bool = False  # its gang is overdue: the room is kept from work that is not

    def render(self) -> str:
        held = f"room held for it in {self.domain} ({self.nodes} nodes)"
        if self.overdue:
            held += ", kept from work of any priority that is not overdue"
        if self.start is None or self.made is None:
            return f"{held}, since a moment not known (no wall clock); expected to start {after_pass(self.after)}"
        return f"{held} since {rfc3339(self.made)}; expected to start by {rfc3339(self.start)}"


def duration(seconds: float) -> str:
    """A duration as Kubernetes writes them: "1h0m", "2m30s", "45s"."""
    hours, rest = divmod(max(0, round(seconds)), 3600)
    return f"{hours}h{rest // 60}m" if hours else f"{rest // 60}m{rest % 60}s" if rest >= 60 else f"{rest}s"


def after_pass(seconds: float) -> str:
    """When, without a wall clock to name the moment: "1h0m after the last reservation pass"."""
    return f"{duration(seconds)} after the last reservation pass"


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
