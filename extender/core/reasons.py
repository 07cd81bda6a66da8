"""Why each gang is where it is: one reason as data per gang, rendered only where it is read.

Every part of the core that decides something about a gang (planning, release, preemption,
repair) records its reason here; the status, `explain` and the server read it back.
"""

from __future__ import annotations

from collections.abc import Iterator

from extender.core.decisions import Reason


class Reasons:
    def __init__(self) -> None:
        self._by_group: dict[str, Reason] = {}

    def __contains__(self, group: object) -> bool:
        return group in self._by_group

    def __getitem__(self, group: str) -> Reason:
        return self._by_group[group]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._by_group))

    def get(self, group: str) -> Reason | None:
        """Why GROUP is pending (or runs without some pods); None: nothing to say."""
        return self._by_group.get(group)

    def text(self, group: str, default: str = "") -> str:
        reason = self._by_group.get(group)
        return reason.render() if reason is not None else default

    def record(self, group: str, reason: Reason | None) -> None:
        """Record why GROUP is where it is (None: nothing to say)."""
        if reason is None:
            self._by_group.pop(group, None)
        else:
            self._by_group[group] = reason

    def sweep(self, groups: set[str]) -> None:
        """Forget the gangs not in GROUPS (gone)."""
        for group in set(self._by_group) - groups:
            del self._by_group[group]
