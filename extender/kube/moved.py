"""The pods moved in the last hour, read back from topogang's own `Moved` Events, so that a new
leader keeps the hour's move budget (`--moves-per-hour`) and each moved pod's cooldown where the
last leader left them instead of starting from zero after every rollout.

Each move is an Event (reason `Moved`, reporting controller topogang) on the moved pod, with the
pod's controller as the related object: the replacement it creates after the move is recognised
by that controller's uid and its creation time. Events live as long as the API server's
`--event-ttl` (one hour by default, the budget's window); a shorter TTL forgets moves sooner.

One list of core/v1 Events selected by reason and reporting component (field selectors the API
server indexes for Events), paged.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Mapping
from typing import Any

import structlog

from extender.core.defragmenting import Defragmenting
from extender.core.moves import HOUR, PastMove
from extender.kube.actions import REPORTING_CONTROLLER
from extender.kube.client import ApiError, KubeClient

MOVED = "Moved"
PATH = "/api/v1/events"
SELECTOR = f"reason={MOVED},reportingComponent={REPORTING_CONTROLLER}"
RETRY = 30.0  # seconds between reads that failed

log = structlog.get_logger("topogang")


async def read_back(client: KubeClient, defrag: Defragmenting, retry: float = RETRY) -> None:
    """This replica starts leading: the last hour's moves read back into DEFRAG. Until then it
    moves no pod (`Moves.known`), so a rollout never spends the hour's budget twice. A failed
    read (e.g. RBAC without `list` on Events) is said and tried again every RETRY seconds."""
    window = max(HOUR, defrag.settings.cooldown)
    while True:
        try:
            past = await past_moves(client, time.time(), time.monotonic(), window)
        except (ApiError, OSError, TimeoutError) as exc:
            log.warning("moves not read back", error=str(exc), then=f"no pod is moved; trying again in {retry:.0f} s")
            await asyncio.sleep(retry)
            continue
        now = time.monotonic()
        defrag.restore(past, now)
        log.info("moves read back", moves=len(past), window_s=window, may_move_this_hour=defrag.moves.room_left(now))
        return


async def past_moves(client: KubeClient, wall_now: float, now: float, since: float) -> list[PastMove]:
    """The moves told by Events of the last SINCE seconds; WALL_NOW: seconds since the epoch,
    NOW: the same instant on the core's clock (what `PastMove.at` is given in)."""
    items, _ = await client.list(PATH, {"fieldSelector": SELECTOR})
    out: list[PastMove] = []
    for item in items:
        move = _move(item, wall_now, now)
        if move is not None and move.at > now - since:
            out.append(move)
    return out


def _move(event: Mapping[str, Any], wall_now: float, now: float) -> PastMove | None:
    """One Event as a move; None when it does not name a pod or a time (not one of ours)."""
    if event.get("reportingComponent") != REPORTING_CONTROLLER or event.get("reason") != MOVED:
        return None  # (the selector asked for these; a server that ignores it is not trusted)
    regarding = event.get("involvedObject") or {}
    namespace, name = regarding.get("namespace"), regarding.get("name")
    meta = event.get("metadata") or {}
    when = _seconds(event.get("eventTime")) or _seconds(meta.get("creationTimestamp"))
    if regarding.get("kind") != "Pod" or not namespace or not name or when is None:
        return None
    owner = (event.get("related") or {}).get("uid") or None
    return PastMove(f"{namespace}/{name}", owner, now - (wall_now - when), when)


def _seconds(stamp: object) -> float | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
