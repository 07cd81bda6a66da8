"""Capped, jittered exponential backoff for retrying list and watch calls."""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    """Delays of INITIAL * FACTOR**n seconds, at most CAP, each shortened at random by up to
    JITTER (a fraction) so that informers failing together do not retry together, even at the
    cap. `reset()` after a success starts again from INITIAL."""

    def __init__(
        self,
        initial: float = 0.5,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 0.2,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if initial <= 0 or cap < initial or factor < 1 or not 0 <= jitter <= 1:
            raise ValueError("backoff needs 0 < initial <= cap, factor >= 1 and 0 <= jitter <= 1")
        self.initial = initial
        self.cap = cap
        self.factor = factor
        self.jitter = jitter
        self._rand = rand
        self.failures = 0

    def next(self) -> float:
        """The delay before the next attempt; counts one more failure."""
        base = min(self.cap, self.initial * self.factor ** min(self.failures, 64))
        self.failures += 1
        return base * (1 - self.jitter * self._rand())

    def reset(self) -> None:
        self.failures = 0
