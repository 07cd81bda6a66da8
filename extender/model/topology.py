"""Topology: node labels that describe the datacenter's hierarchy, coarsest level first.

topogang reads its own `scheduling.topogang.io/v1alpha1` Topology and the same shape from KAI
(`kai.scheduler/v1alpha1`) and Kueue (`kueue.x-k8s.io/*`). The node itself is always the finest
level: when the last listed label is not `kubernetes.io/hostname`, that level is implied.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cached_property

from extender.model.node import HOSTNAME_LABEL
from extender.model.raw import JSON, identify, mapping, opt_str, seq, unknown_fields

TOPOLOGY_API_VERSIONS = frozenset(
    {
        "scheduling.topogang.io/v1alpha1",
        "kai.scheduler/v1alpha1",
        "kueue.x-k8s.io/v1alpha1",
        "kueue.x-k8s.io/v1beta1",
        "kueue.x-k8s.io/v1beta2",
    }
)
NODE_LEVEL_NAMES = ("node", "hostname")
# The fields of a Topology (the same in topogang's, KAI's and Kueue's): anything else is reported.
OBJECT_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})
SPEC_FIELDS = frozenset({"levels"})
LEVEL_FIELDS = frozenset({"nodeLabel", "alias"})


class LevelError(ValueError):
    """A constraint names a level that the topology does not have, or that fits several."""


def short_level_name(node_label: str) -> str:
    """'example.com/topology-rack' -> 'rack'; 'kubernetes.io/hostname' -> 'hostname'."""
    name = node_label.rpartition("/")[2]
    return name.removeprefix("topology-") or name


@dataclass(frozen=True, slots=True)
class TopologyLevel:
    node_label: str
    alias: str | None = None

    @property
    def display(self) -> str:
        if self.alias:
            return self.alias
        return "node" if self.node_label == HOSTNAME_LABEL else short_level_name(self.node_label)


@dataclass(frozen=True)
class TopologySpec:
    """Levels coarsest first, always ending with the node level (kubernetes.io/hostname)."""

    name: str
    levels: tuple[TopologyLevel, ...]

    @property
    def node_level(self) -> int:
        """The node's level as placement counts levels: 0 is the whole cluster, 1 the first label."""
        return len(self.levels)

    def level(self, name: str) -> int:
        """The placement level (cluster = 0) of the level a constraint names; see `resolve`."""
        return self.resolve(name) + 1

    @cached_property
    def _names(self) -> dict[str, frozenset[int]]:
        names: dict[str, set[int]] = {}
        for i, level in enumerate(self.levels):
            keys = {level.node_label, short_level_name(level.node_label)}
            if level.alias:
                keys.add(level.alias)
            if level.node_label == HOSTNAME_LABEL:
                keys.update(NODE_LEVEL_NAMES)
            for key in keys:
                names.setdefault(key, set()).add(i)
        return {k: frozenset(v) for k, v in names.items()}

    def valid_names(self) -> list[str]:
        return sorted(k for k, v in self._names.items() if len(v) == 1)

    def resolve(self, name: str) -> int:
        """The index of the level a constraint names: full label, alias, short name or 'node'."""
        found = self._names.get(name)
        label = f"Topology {self.name}" if self.name else "the node-only topology"
        if not found:
            meant = self.meant(name)
            hint = f"did you mean {meant}?" if meant else f"(valid: {', '.join(self.valid_names())})"
            raise LevelError(f"{name!r} is not a level of {label}{';' if meant else ''} {hint}")
        if len(found) > 1:
            labels = ", ".join(self.levels[i].node_label for i in sorted(found))
            raise LevelError(f"{name!r} is ambiguous in {label}: it names {labels}; use the full node label")
        return next(iter(found))

    def meant(self, name: str) -> str | None:
        """The level NAME misspells: the one that differs only in case, else the closest by
        difflib (ratio 0.8, case aside); None when none is that close."""
        valid = self.valid_names()
        lowered = {v.lower(): v for v in reversed(valid)}  # the first in sorted order wins
        if name.lower() in lowered:
            return lowered[name.lower()]
        close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.8)
        return lowered[close[0]] if close else None

    def describe(self) -> str:
        return " > ".join(level.display for level in self.levels)


# A preferred level written "auto" (Kueue, Kueue's TAS KEP): the finest level of the Topology, from
# which placement climbs to the first level where one domain holds the scope.
AUTO_LEVEL = "auto"

NODE_ONLY = TopologySpec("", (TopologyLevel(HOSTNAME_LABEL),))


def parse_topology(body: JSON) -> TopologySpec:
    """Parse a Topology object; raise InvalidObject naming the field when it cannot be used."""
    _, name, _, errors = identify(body, "Topology")
    spec = mapping(body.get("spec"), "spec", errors)
    unknown_fields(body, OBJECT_FIELDS, "", errors)
    unknown_fields(spec, SPEC_FIELDS, "spec", errors)
    raw_levels = seq(spec.get("levels"), "spec.levels", errors)
    if not raw_levels:
        errors.add("spec.levels", "expected at least one level, e.g. [{nodeLabel: example.com/topology-rack}]")
    levels: list[TopologyLevel] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw_levels):
        where = f"spec.levels[{i}]"
        level = mapping(item, where, errors)
        unknown_fields(level, LEVEL_FIELDS, where, errors)
        label = opt_str(level.get("nodeLabel"), f"{where}.nodeLabel", errors)
        alias = opt_str(level.get("alias"), f"{where}.alias", errors) or None
        if not label:
            errors.add(f"{where}.nodeLabel", "expected a node label name such as example.com/topology-rack")
            continue
        if label in seen:
            errors.add(f"{where}.nodeLabel", f"{label} is already level {seen[label]}")
            continue
        if label == HOSTNAME_LABEL and i != len(raw_levels) - 1:
            errors.add(f"{where}.nodeLabel", f"{HOSTNAME_LABEL} must be the last (finest) level")
        seen[label] = i
        levels.append(TopologyLevel(label, alias))
    aliases = [lv.alias for lv in levels if lv.alias]
    for alias in sorted({a for a in aliases if aliases.count(a) > 1}):
        errors.add("spec.levels", f"alias {alias!r} is used by more than one level")
    errors.raise_if_any()
    if levels[-1].node_label != HOSTNAME_LABEL:
        levels.append(TopologyLevel(HOSTNAME_LABEL))
    return TopologySpec(name, tuple(levels))
