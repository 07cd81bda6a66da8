"""How long work runs, learnt from the work that finished: what the estimated starts expect of
running pods that declare no runtime bound, and of waiting gangs once they start.

For each owner kind (a Job's pods, a JobSet's, a plain pod's ""), the run times of the last
`keep` pods that finished. A pod that has run `age` seconds is expected to run on until the
median of the run times longer than `age` (the median remaining life of work like it that lived
that long: heavy-tailed work that has run long is expected to run long); a pod older than every
run time seen, or of a kind with fewer than `least` run times seen, falls back to the reservation
pass's rule (`reservations.expected_end`: twice as long again as it ran, at least `floor`). A
gang not started yet is expected to run the median run time of its kind (its runtime bound when
it declares one).

The reservation pass keeps its own rule for where to hold room: a domain drains when its last
pod ends, and that pessimism is what the held room needs; an estimated start is told to a user,
for whom the likely moment is what matters. bench/trace.py measures both.

Pure: run times in, expectations out; the caller passes the clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from extender.core.reservations import FloatArray


@dataclass
class Lifetimes:
    keep: int = 1000  # run times kept per kind: the latest
    least: int = 20  # run times needed before they are trusted
    _seen: dict[str, deque[float]] = field(default_factory=dict)
    _sorted: dict[str, FloatArray] = field(default_factory=dict)

    def observe(self, kind: str, seconds: float) -> None:
        if seconds < 0:
            return
        self._seen.setdefault(kind, deque(maxlen=self.keep)).append(seconds)
        self._sorted.pop(kind, None)

    def _runs(self, kind: str) -> FloatArray | None:
        if len(self._seen.get(kind, ())) < self.least:
            return None
        if kind not in self._sorted:
            self._sorted[kind] = np.sort(np.fromiter(self._seen[kind], np.float64))
        return self._sorted[kind]

    def run(self, kind: str) -> float | None:
        """How long work of KIND is expected to run from its start (None: too few seen)."""
        runs = self._runs(kind)
        return None if runs is None else float(runs[len(runs) // 2])

    def ends(self, now: float, kinds: Sequence[str], started: FloatArray, fallback: FloatArray) -> FloatArray:
        """Expected ends of pods of KINDS that started at STARTED, unbounded: the median of the
        longer run times seen of their kind, else FALLBACK (the pass's rule)."""
        out = fallback.copy()
        for kind in set(kinds):
            runs = self._runs(kind)
            if runs is None:
                continue
            mine = np.fromiter((k == kind for k in kinds), np.bool_, len(kinds))
            age = now - started[mine]
            first = np.searchsorted(runs, age, side="right")  # the run times longer than its age
            known = first < len(runs)
            median = runs[np.minimum(first + (len(runs) - first) // 2, len(runs) - 1)]
            out[mine] = np.where(known, started[mine] + median, fallback[mine])
        return np.maximum(out, now)
