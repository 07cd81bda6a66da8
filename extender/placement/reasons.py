"""Why a gang cannot be placed, as data; rendered to text only where someone reads it.

The message names the scope and the constraint that failed, what it needed, the best that was
found, and the nodes left out by reason, e.g.

    SubGroup workers-2: 4 pods x {nvidia.com/gpu: 8} in one rack inside zone z1; the best rack
    there fits 3; nodes left out: 12 not ready or cordoned, 8 taint dedicated=infer:NoSchedule,
    40 nvidia.com/gpu
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from extender.placement.leftout import Excluded

# Shortfall kinds.
NO_DOMAIN = "NoDomain"  # no domain of the required level holds the scope
NO_CAPACITY = "NoCapacity"  # the scope's own region is too small (no level asked)
INCOMPLETE = "GangIncomplete"  # fewer pods exist than the minimum needs
SEARCH_LIMIT = "SearchLimit"  # the search gave up after too many candidate domains


@dataclass(frozen=True)
class Shortfall:
    kind: str
    scope: str  # "SubGroup workers-2"
    pods: int  # pods needed
    shape: str = ""  # "{nvidia.com/gpu: 8}"
    level: str | None = None  # the level asked for, "rack"
    region: str | None = None  # where it had to be, "zone z1"; None for the whole cluster
    best: int = 0  # the most pods of that shape one domain (or the region) could take
    source: str = ""  # the constraint's field
    excluded: Mapping[Excluded, int] = field(default_factory=dict)  # why -> nodes left out
    tried: int = 0  # SEARCH_LIMIT: candidate domains tried before giving up
    progress: int = 0  # pods placed when this failed: the deepest failure explains best
    present: int = 0  # for INCOMPLETE: pods that exist
    exclusive: bool = False  # the level had to be free of other gangs' pods
    no_label: str = ""  # NO_DOMAIN: the level's node label, when no node in the region carries it
    pinned: str | None = None  # NO_DOMAIN: the domain the scope's running pods hold it to
    # NO_DOMAIN, NO_CAPACITY: found with nothing running (every node's whole allocatable), so
    # no wait helps: `best` is the most the constraint allows on these nodes
    never: bool = False

    def render_steady(self) -> str:
        """As `render`, without what changes as a gang fills (its count of pods present): the
        text kube-scheduler writes into each refused pod's PodScheduled condition, which it
        writes again whenever the text changes (a write per member per retry)."""
        if self.kind == INCOMPLETE:
            whole = "gang " if self.scope.startswith("PodGroup ") else ""
            return f"{self.scope}: {whole}not all {self.pods} pods present yet"
        return self.render()

    def render(self) -> str:
        if self.kind == INCOMPLETE:
            whole = "gang " if self.scope.startswith("PodGroup ") else ""
            return f"{self.scope}: {whole}{self.present}/{self.pods} pods present"
        where = f" inside {self.region}" if self.region else ""
        if self.kind == SEARCH_LIMIT:
            return f"{self.scope}: gave up after trying {self.tried} candidate domains{where}"
        need = f"{self.pods} pod{'s' if self.pods != 1 else ''} x {self.shape}"
        if self.kind == NO_DOMAIN and self.no_label:
            there = " there" if where else ""
            return f"{self.scope}: {need} in one {self.level}{where}; no node{there} has label {self.no_label}"
        if self.kind == NO_DOMAIN and self.pinned is not None:
            text = f"{self.scope}: {need} in {self.pinned}, where its running pods hold it; it has room for {self.best}"
        elif self.kind == NO_DOMAIN:
            free = " free of other gangs' pods" if self.exclusive else ""
            best = f"the best such {self.level}" if self.exclusive else f"the best {self.level}"
            text = f"{self.scope}: {need} in one {self.level}{free}{where}; {best}{' there' if where else ''}"
            text += f" fits {self.best}"
        else:
            text = f"{self.scope}: {need}{where or ' in the cluster'}; only {self.best} fit"
        if self.never:
            text += " even with nothing running"
        if self.excluded:
            parts = sorted(((str(why), n) for why, n in self.excluded.items()), key=lambda kv: (-kv[1], kv[0]))
            text += "; nodes left out: " + ", ".join(f"{n} {why}" for why, n in parts)
        return text
