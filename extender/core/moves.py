"""Moves under way: the new room of each pod moved for a gang, held until its replacement binds.

A moved pod is evicted and recreated by its controller under a new name (a StatefulSet's under
the same). Its new room is reserved in `ClusterState` at once, under a key of its own
(`move:<namespace>/<name>`), so gangs plan around it and plain pods are kept off it like any
reservation. The first unbound pod of the same controller and namespace whose requests fit that
room, and of the same gang (a plain pod's by a plain pod), *claims* it: the reservation passes to
the new pod's key, the filter answers it with that node alone, and the reservation goes when the
pod is seen bound (or deleted). Room no pod claimed within the timeout is given back.

Bounded disruption: at most `per_hour` pods are moved in any hour (a sliding window), and a pod
moved (or a replacement placed by a move) is not moved again within `cooldown` seconds. Both
outlive a change of leader: the new leader reads the hour's moves back (`restore`, from the
`Moved` Events the last one wrote: kube/moved.py) before it moves anyone (`known`).

Synchronous and clock-free like the rest of the core: callers pass `now`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from extender.core.cluster import ClusterState
from extender.model.pod import PodInfo

PREFIX = "move:"
HOUR = 3600.0


@dataclass(frozen=True)
class MoveSettings:
    enabled: bool = True
    per_hour: int = 20  # pods moved in any hour, cluster-wide
    cooldown: float = 3600.0  # seconds before a moved pod (or its replacement) may move again
    controllers: bool = False  # every pod of a Deployment, ReplicaSet or StatefulSet is movable
    timeout: float = 300.0  # seconds the new room waits for the replacement to claim it


@dataclass(frozen=True)
class PastMove:
    """A move a previous leader made, as its Event tells it."""

    pod: str  # the moved pod
    owner: str | None  # its controller's uid: the replacement is a pod of it created after the move
    at: float  # when, on the caller's clock (`now`)
    created_after: float  # when, in seconds since the epoch (PodInfo.created's clock)


@dataclass
class Move:
    pod: str  # the moved pod
    owner: tuple[str, str, str]  # (namespace, controller kind, controller uid)
    requests: Mapping[str, int]
    node: str  # its new room
    group: str  # the gang it made room for
    deadline: float
    member_of: str | None = None  # the gang the moved pod is a member of (None: a plain pod)
    claimed: str | None = None  # the replacement holding the room now


class Moves:
    def __init__(self, state: ClusterState, settings: MoveSettings) -> None:
        self.state = state
        self.settings = settings
        self.by_pod: dict[str, Move] = {}  # moved pod -> its move
        self._claimed: dict[str, str] = {}  # replacement pod -> the moved pod whose room it holds
        self._times: deque[float] = deque()  # when each pod was moved, within the last hour
        self._cool: dict[str, float] = {}  # pod key -> until when it stays in place
        # controller uid -> (epoch seconds of a move a previous leader made, until when): its pods
        # created after that move are the replacement, which stays in place as a moved pod does
        self._owner_cool: dict[str, tuple[float, float]] = {}
        self.known = True  # whether the moves of the last hour are known (False: a new leader's, until restored)
        self.total = 0  # pods moved since start

    # -- the limiter ---------------------------------------------------------------------------

    def room_left(self, now: float) -> int:
        """How many pods may still be moved in the hour ending NOW."""
        while self._times and self._times[0] <= now - HOUR:
            self._times.popleft()
        return max(0, self.settings.per_hour - len(self._times))

    def cooling(self, pod: PodInfo, now: float) -> bool:
        until = self._cool.get(pod.key)
        if until is not None:
            if until > now:
                return True
            del self._cool[pod.key]
        ref = pod.controller
        if ref is None or not ref.uid or (owner := self._owner_cool.get(ref.uid)) is None:
            return False
        if owner[1] <= now:
            del self._owner_cool[ref.uid]
            return False
        return pod.created is None or pod.created >= owner[0]  # unknown age: assume the replacement

    def restore(self, past: list[PastMove], now: float) -> None:
        """A new leader's start: the moves of the last hour count against the budget, and the pods
        moved (and their replacements) keep their cooldown. Moves this replica made itself are in
        PAST too (its Events), so the window is replaced, not added to."""
        recent = sorted(m.at for m in past if m.at > now - HOUR)
        self._times = deque(recent)
        for m in past:
            until = m.at + self.settings.cooldown
            if until <= now:
                continue
            self._cool[m.pod] = max(until, self._cool.get(m.pod, until))
            if m.owner:
                since, was = self._owner_cool.get(m.owner, (m.created_after, until))
                self._owner_cool[m.owner] = (min(since, m.created_after), max(was, until))
        self.known = True

    # -- holding and claiming ------------------------------------------------------------------

    def hold(self, group: str, moves: Mapping[str, str], now: float, group_of: Callable[[str], str | None]) -> None:
        """Reserve each moved pod's new room (MOVES: pod -> node) and count the moves; GROUP_OF: the
        gang a pod is a member of, which its replacement must be a member of too."""
        for key, node in sorted(moves.items()):
            pod = self.state.pods[key]
            ref = pod.controller
            assert ref is not None, "only pods a controller recreates are moved"
            owner, deadline = (pod.namespace, ref.kind, ref.uid), now + self.settings.timeout
            move = Move(key, owner, pod.requests, node, group, deadline, member_of=group_of(key))
            self.release(key)
            self.by_pod[key] = move
            self.state.reserve(PREFIX + key, node, pod.requests)
            self._times.append(now)
            self._cool[key] = now + self.settings.cooldown
            self.total += 1

    def claim(self, pod: PodInfo, now: float) -> str | None:
        """The node held for POD, a plain pod, if it replaces a moved plain pod (claiming that room
        on first ask)."""
        moved = self._claimed.get(pod.key)
        if moved is not None:
            return self.by_pod[moved].node
        move = self.awaiting(pod, None)
        if move is None:
            return None
        move.claimed = pod.key
        self._claimed[pod.key] = move.pod
        self.state.unreserve(PREFIX + move.pod)
        self.state.reserve(pod.key, move.node, pod.requests)
        self._cool[pod.key] = now + self.settings.cooldown
        return move.node

    def awaiting(self, pod: PodInfo, group: str | None) -> Move | None:
        """The unclaimed move POD, a member of GROUP (None: a plain pod), would claim, claiming
        nothing (gates mode's webhook asks it of a pod being created, which may have no name yet).
        A controller may make both kinds: a gang member's room goes to a member of its gang only."""
        ref = pod.controller
        if ref is None or pod.node_name is not None or not self.by_pod:
            return None
        owner = (pod.namespace, ref.kind, ref.uid)
        for move in self.by_pod.values():
            mine = move.claimed is None and move.owner == owner and move.member_of == group
            if mine and _fits(pod.requests, move.requests):
                return move
        return None

    def take(self, pod: PodInfo, group: str, now: float) -> Move | None:
        """The unclaimed move POD (a member of GROUP replacing a member moved) replaces, over: its
        room is given back for the caller to hold in GROUP's plan at once (`Plans.adopt`); POD
        stays in place for the cooldown, as a claiming replacement does."""
        move = self.awaiting(pod, group)
        if move is None:
            return None
        self.release(move.pod)
        self._cool[pod.key] = now + self.settings.cooldown
        return move

    def is_moving(self, pod: str) -> bool:
        return pod in self._claimed

    def placed(self, pod: str) -> Move | None:
        """POD (a replacement) was seen bound, or left: its move is over, its room no longer held."""
        moved = self._claimed.pop(pod, None)
        if moved is None:
            return None
        self.state.unreserve(pod)
        return self.by_pod.pop(moved, None)

    def release(self, moved: str) -> None:
        move = self.by_pod.pop(moved, None)
        if move is None:
            return
        if move.claimed is not None:
            self._claimed.pop(move.claimed, None)
            self.state.unreserve(move.claimed)
        else:
            self.state.unreserve(PREFIX + moved)

    def expire(self, now: float) -> list[Move]:
        """Moves whose room no replacement claimed in time: the room is given back."""
        late = [m for m in self.by_pod.values() if m.claimed is None and now > m.deadline]
        for move in late:
            self.release(move.pod)
        return late

    def drop_all(self) -> None:
        """This replica stops leading: every held room is given back, and should it lead again
        the hour's moves are read back first (another leader may have moved pods meanwhile)."""
        for moved in list(self.by_pod):
            self.release(moved)
        self.known = False

    def of(self, group: str) -> list[Move]:
        """The moves made for GROUP still under way."""
        return [m for m in self.by_pod.values() if m.group == group]


def _fits(requests: Mapping[str, int], held: Mapping[str, int]) -> bool:
    return all(v <= held.get(r, 0) for r, v in requests.items() if v > 0)
