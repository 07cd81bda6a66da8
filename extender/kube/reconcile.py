"""What a relist changes: the events that turn what an informer knew into what the list says.

An informer remembers only the identity of each object (`Seen`: namespace, name, uid,
resourceVersion), not its body, so thousands of pods cost little; an object that vanished is
announced with a *tombstone*, its apiVersion, kind and metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

ADDED = "ADDED"
MODIFIED = "MODIFIED"
DELETED = "DELETED"
BOOKMARK = "BOOKMARK"

JSONDict = dict[str, Any]
Event = tuple[str, JSONDict]


@dataclass(frozen=True, slots=True)
class Seen:
    namespace: str
    name: str
    uid: str
    resource_version: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def tombstone(self, api_version: str, kind: str) -> JSONDict:
        meta = {"name": self.name, "uid": self.uid, "resourceVersion": self.resource_version}
        if self.namespace:
            meta["namespace"] = self.namespace
        return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def seen(obj: Mapping[str, Any]) -> Seen:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return Seen(
        str(meta.get("namespace") or ""),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        str(meta.get("resourceVersion") or ""),
    )


def reconcile(
    known: Mapping[str, Seen], listed: Iterable[JSONDict], tombstone: Callable[[Seen], JSONDict]
) -> tuple[list[Event], dict[str, Seen]]:
    """The events and the new identities after a relist, all at once (`relist` is the same, lazily):
    - DELETED (a tombstone) for each known object the list no longer has, first;
    - ADDED for each listed object not known; DELETED then ADDED for one known under the same
      name with another uid (deleted and created again while the watch was down);
    - MODIFIED for each whose resourceVersion moved; nothing for those unchanged."""
    listed = list(listed)
    fresh = {(now := seen(obj)).key: now for obj in listed}
    return [event for step in relist(dict(known), listed, tombstone) for event in step], fresh


def relist(
    known: dict[str, Seen], listed: list[JSONDict], tombstone: Callable[[Seen], JSONDict]
) -> Iterator[tuple[Event, ...]]:
    """`reconcile`'s events in its order, one step per unit of work (a listed object read, a known
    one looked at, a listed one compared), each step the events it makes, often none: a caller
    may pause between any two steps, so a list of 100,000 objects need not be one step of an
    event loop. KNOWN and LISTED are consumed as the steps are taken (what a list of 100,000
    objects holds is freed a little at a time, not all in one step at its end): pass copies."""
    identities: list[Seen] = []
    fresh: set[str] = set()
    for obj in listed:
        identities.append(now := seen(obj))
        fresh.add(now.key)
        yield ()
    for key in list(known):
        yield ((DELETED, tombstone(known.pop(key))),) if key not in fresh else ()
    listed.reverse()  # (taken from the end, in the list's order)
    identities.reverse()
    while listed:
        obj, now = listed.pop(), identities.pop()
        before = known.pop(now.key, None)
        if before is None:
            yield ((ADDED, obj),)
        elif before.uid != now.uid:
            yield (DELETED, tombstone(before)), (ADDED, obj)
        elif before.resource_version != now.resource_version:
            yield ((MODIFIED, obj),)
        else:
            yield ()
