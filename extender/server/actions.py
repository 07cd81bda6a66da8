"""What the extender asks of the API server (implemented by extender.kube.actions.KubeActions)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

BLOCKED = "blocked"  # Actions.evict: a PodDisruptionBudget refused it for now


class Actions(Protocol):
    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...

    async def wake(self, pods: Sequence[tuple[str, str]], generation: int) -> None: ...

    async def nominate(
        self, pods: Sequence[tuple[str, str]], generation: int, node_of: Callable[[str, str], str | None]
    ) -> None: ...

    async def event(
        self,
        involved: Mapping[str, str],
        reason: str,
        message: str,
        type: str = "Normal",
        related: Mapping[str, str] | None = None,
    ) -> None: ...

    async def evict(self, namespace: str, name: str, uid: str) -> str: ...
