"""Trouble with the API server, as one client sees it: counted per kind, said once per episode.

    throttled    a 429 (API Priority and Fairness, or a proxy in front) answered a request
    unavailable  the connection failed (refused, reset, closed) or a 500/502/503/504 came back:
                 the API server is restarting, or its etcd is
    slow         a request took longer than `slow_seconds`, or ran out of its timeout

An episode of one kind starts with its first occurrence after a quiet spell (a warning,
`API server trouble`, naming what happened) and ends with the first request that goes well
`quiet_seconds` after the last trouble of that kind (an info line, `API server trouble over`,
with how many and for how long). So a flood of failing requests is two lines, not thousands, and
every kind of trouble is in the log. `counts` feeds topogang_api_trouble_total{kind}; relists
after a 410 are counted by the informers (the fourth kind of that metric).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

THROTTLED, UNAVAILABLE, SLOW = "throttled", "unavailable", "slow"
KINDS = (THROTTLED, UNAVAILABLE, SLOW)
UNAVAILABLE_STATUSES = frozenset({500, 502, 503, 504})


@dataclass
class _Episode:
    began: float
    last: float
    count: int


class Trouble:
    def __init__(
        self,
        *,
        slow_seconds: float = 2.0,
        quiet_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        log: structlog.typing.FilteringBoundLogger | None = None,
    ) -> None:
        self.slow_seconds = slow_seconds
        self.quiet_seconds = quiet_seconds
        self.clock = clock
        self.log = log or structlog.get_logger("topogang.kube")
        self.counts = dict.fromkeys(KINDS, 0)
        self._open: dict[str, _Episode] = {}

    def record(self, kind: str, method: str, path: str, detail: str) -> None:
        """One request met trouble of KIND (DETAIL: the status or error)."""
        assert kind in KINDS, kind
        now = self.clock()
        self.counts[kind] += 1
        episode = self._open.get(kind)
        if episode is not None:
            episode.last, episode.count = now, episode.count + 1
            return
        self._open[kind] = _Episode(now, now, 1)
        self.log.warning("API server trouble", kind=kind, request=f"{method} {path}", detail=detail[:300])

    def status(self, code: int, method: str, path: str, message: str, seconds: float) -> None:
        """A response came back with CODE after SECONDS."""
        if code == 429:
            self.record(THROTTLED, method, path, f"429: {message}")
        elif code in UNAVAILABLE_STATUSES:
            self.record(UNAVAILABLE, method, path, f"{code}: {message}")
        elif seconds > self.slow_seconds:
            self.record(SLOW, method, path, f"answered in {seconds:.1f}s")
        elif self._open:
            self._went_well()

    def _went_well(self) -> None:
        now = self.clock()
        for kind, episode in list(self._open.items()):
            if now - episode.last >= self.quiet_seconds:
                del self._open[kind]
                self.log.info(
                    "API server trouble over",
                    kind=kind,
                    requests=episode.count,
                    seconds=round(episode.last - episode.began, 1),
                )

    @property
    def troubled(self) -> list[str]:
        """The kinds in an episode now."""
        return sorted(self._open)
