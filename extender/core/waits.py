"""What a waiting gang is told about its wait, as data: whether it is overdue (it has waited past
its maximum wait), and when it is expected to start (the room held for it: core/held_room.py).

Rendered to text only at the edges (its PodGroup's message, `explain`, the simulator). Times
are wall-clock seconds, None when no wall clock is known (a simulation of input without times):
then only durations after the last reservation pass are shown.
"""

from __future__ import annotations

from dataclasses import dataclass

from extender.core.held_room import after_pass, duration, rfc3339
from extender.placement import DomainRef


def _when(at: float | None, after: float) -> str:
    return rfc3339(at) if at is not None else after_pass(after)


@dataclass(frozen=True)
class Overdue:
    """The gang has waited for room longer than its maximum wait: it takes a reservation slot
    before any gang that is not overdue, and the room held for it is kept from them."""

    since: float | None  # when it became overdue (wall clock); None: no wall clock
    limit: float  # its maximum wait, seconds
    ago: float  # seconds from then to the last reservation pass
    holding: bool  # room is held for it (else the gangs overdue longer hold the slots)

    def render(self) -> str:
        when = rfc3339(self.since) if self.since is not None else f"{duration(self.ago)} before the last pass"
        held = "room is held for it" if self.holding else "no room held for it yet (gangs overdue longer come first)"
        return f"overdue since {when}: waited past its maximum wait of {duration(self.limit)}; {held}"


@dataclass(frozen=True)
class Expected:
    """When a waiting gang is expected to start (core/estimates.py), and what that assumed."""

    position: int  # in the queue as the reservation pass orders it (1: first)
    queued: int  # gangs waiting in that queue
    start: float | None  # wall clock; None: no wall clock, or never (see `never`)
    after: float  # seconds from the last pass to the start
    never: bool = False  # no domain holds the gang even empty
    domain: DomainRef | None = None  # where it is expected to start
    waits_for: int = 0  # running pods (and pods of gangs ahead) whose end it waits for
    bounded: int = 0  # of those, ends known from a runtime bound
    ahead: int = 0  # of those, pods of gangs expected to start before it
    floor: float = 0.0  # how long a pod without a bound is expected to run at least (see `assumed`)
    stretch: float = 0.0  # ... and how many times as long again as it has run

    def render(self) -> str:
        where = f"position {self.position} of {self.queued} in the queue"
        if self.never:
            return f"{where}; no domain holds it even empty: no start expected"
        return f"{where}; expected to start by {_when(self.start, self.after)}"

    def assumed(self) -> str:
        """What the estimate assumed, for `explain`."""
        if self.never:
            return "no domain of its level holds it even with every node empty"
        if not self.waits_for:
            return "room for it is free now (counted in pods of its largest request on every schedulable node)"
        guessed = self.waits_for - self.bounded - self.ahead
        parts = [f"{self.bounded} at their runtime bound"] if self.bounded else []
        if guessed:
            parts.append(
                f"{guessed} after running {self.stretch:g} x as long again as they have run"
                f" (at least {duration(self.floor)})"
            )
        if self.ahead:
            parts.append(
                f"{self.ahead} of gangs expected to start before it, each running its runtime bound"
                f" (else {duration(self.floor)})"
            )
        where = f" in {self.domain}" if self.domain is not None else ""
        return f"it waits for {self.waits_for} pod(s){where} to end: {', '.join(parts)}"
