"""What a relist changes: the events that turn what an informer knew into what the list says.

An informer remembers only the identity of each object (`Seen`: namespace, name, uid,
resourceVersion), not its body, so thousands of pods cost little; an object that vanished is
announced with a *tombstone*, its apiVersion, kind and metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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
    """The events and the new identities after a relist:
    - DELETED (a tombstone) for each known object the list no longer has, first;
    - ADDED for each listed object not known; DELETED then ADDED for one known under the same
      name with another uid (deleted and created again while the watch was down);
    - MODIFIED for each whose resourceVersion moved; nothing for those unchanged."""
    events: list[Event] = []
    fresh: dict[str, Seen] = {}
    for obj in listed:
        now = seen(obj)
        fresh[now.key] = now
        before = known.get(now.key)
        if before is None:
            events.append((ADDED, obj))
        elif before.uid != now.uid:
            events += [(DELETED, tombstone(before)), (ADDED, obj)]
        elif before.resource_version != now.resource_version:
            events.append((MODIFIED, obj))
    gone = [(DELETED, tombstone(before)) for key, before in known.items() if key not in fresh]
    return gone + events, fresh
