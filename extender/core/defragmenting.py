"""Defragmenting: what the scheduler does for a gang that waits for a whole domain while movable
pods keep every domain from being whole.

attempt   search the pods to move (`find_moves`), at most once per `retry` seconds per gang and
          only when the cluster changed since a search that found nothing, within what the
          hour's move budget has left; on success the gang's room is held as a preemption's is
          (the same nomination: the moved pods are its victims, evicted through the Eviction
          API) and each moved pod's new room is held too (`Moves`), until its replacement binds.
blocked   why a gang waits when only moves beyond what PodDisruptionBudgets allow would make room.

Moves are tried before preemption: a moved pod keeps running, a preempted one does not.
"""

from __future__ import annotations

from collections.abc import Callable

from extender.core.cluster import ClusterState
from extender.core.decisions_room import BudgetBlocked
from extender.core.defrag import find_moves
from extender.core.membership import Membership
from extender.core.movable import movability
from extender.core.moves import Moves, MoveSettings, PastMove
from extender.core.nomination import Nomination
from extender.core.preempting import RETRY, Preempting
from extender.placement import INCOMPLETE, NoPreemption, PreemptionResult, Shortfall

MOVING = "moving pods"


class Defragmenting:
    def __init__(
        self,
        state: ClusterState,
        membership: Membership,
        preempting: Preempting,
        settings: MoveSettings,
        *,
        retry: float = RETRY,
        busy: Callable[[str], bool] = lambda group: False,
    ) -> None:
        """BUSY(group): the gang has a preemption or a repair of its own under way (none of its
        members is moved)."""
        self.state = state
        self.membership = membership
        self.preempting = preempting
        self.settings = settings
        self.moves = Moves(state, settings)
        self.retry = retry
        self.busy = busy
        self._tried: dict[str, tuple[int, float]] = {}  # group -> (state version, when) of a fruitless search
        self.last: dict[str, NoPreemption] = {}  # group -> why its last search found nothing to move
        self.seen = 0.0  # the latest time a caller passed (what `explain`, which has no clock, reads)
        state.subscribe(self._changed)

    def _changed(self, kind: str, key: object) -> None:
        if kind == "budget":  # a budget that changes may allow the move now
            for group in [g for g, why in self.last.items() if why.overruns]:
                self._tried.pop(group, None)

    def movable(self, key: str, now: float) -> bool:
        pod = self.state.pods.get(key)
        if pod is None or self.moves.cooling(pod, now) or self.moves.is_moving(key):
            return False
        group = self.membership.group_of(key)
        podgroup = self.membership.view(group).spec if group is not None else None
        return movability(self.state, pod, self.settings.controllers, podgroup).movable

    def search(self, group: str, now: float | None = None) -> PreemptionResult:
        """What a move for GROUP would be now (nothing held or evicted): `explain`'s dry run too
        (NOW None: the latest time seen)."""
        now = self.seen if now is None else now
        if not self.settings.enabled:
            return NoPreemption(group, "defragmentation is off (--defragment=false)")
        if not self.moves.known:  # a new leader, before the last one's moves are read back
            return NoPreemption(
                group, "the moves of the last hour are not read yet (this replica has just started leading)"
            )
        left = self.moves.room_left(now)
        if left <= 0:
            return NoPreemption(
                group, f"{self.settings.per_hour} pod(s) were moved in the last hour (--moves-per-hour)"
            )
        found = find_moves(
            self.state,
            self.membership,
            group,
            lambda key: self.movable(key, now),
            exclude=self.preempting.nominations.evicting(),
            busy=self.busy,
        )
        if not isinstance(found, NoPreemption) and len(found.pods) > left:
            why = f"it needs {len(found.pods)} pod(s) moved and only {left} more may move this hour (--moves-per-hour)"
            return NoPreemption(group, why, found.plans)
        return found

    def attempt(self, group: str, now: float) -> Nomination | NoPreemption | None:
        """Move pods for GROUP; None when off, or when a recent search already found nothing."""
        if not self.settings.enabled:
            return None
        self.seen = max(self.seen, now)
        tried = self._tried.get(group)
        if tried is not None and (tried[0] == self.state.version or now - tried[1] < self.retry):
            return None
        found = self.search(group, now)
        if isinstance(found, NoPreemption):
            self._tried[group] = (self.state.version, now)
            self.last[group] = found
            return found
        self._tried.pop(group, None)
        self.last.pop(group, None)
        nom = self.preempting.hold(found, now)
        self.moves.hold(group, found.moves, now, self.membership.group_of)
        return nom

    def blocked(self, group: str, why: Shortfall | BudgetBlocked) -> Shortfall | BudgetBlocked:
        """WHY, or the PodDisruptionBudgets that keep GROUP's last move search from moving anyone
        (when preemption's budgets did not already say why)."""
        last = self.last.get(group)
        if not isinstance(why, Shortfall) or last is None or not last.overruns or why.kind == INCOMPLETE:
            return why
        return BudgetBlocked(why, last.overruns, verb=MOVING)

    def forget(self, group: str) -> None:
        self._tried.pop(group, None)
        self.last.pop(group, None)

    def restore(self, past: list[PastMove], now: float) -> None:
        """This replica starts leading: the last hour's moves read back; searches found nothing
        while they were unknown, so every gang may search again."""
        self.moves.restore(past, now)
        self._tried.clear()
        self.last.clear()

    def drop_all(self) -> None:
        self.moves.drop_all()
        self._tried.clear()
        self.last.clear()

    def sweep(self, groups: set[str]) -> None:
        for group in (set(self._tried) | set(self.last)) - groups:
            self.forget(group)
