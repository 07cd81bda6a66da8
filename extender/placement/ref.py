"""A domain of the topology by value, as plans, reasons and statuses name it.

Its own module, below the tree and the results that both use it (the tree makes them, plans
carry them), so that neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DomainRef:
    """A domain of the gang's Topology, by value: its level's name and its path of label values."""

    level: str  # "rack", "node", "cluster"
    path: str  # "z1/b1/r3" from the coarsest level down; the node's name at the node level; "" for the cluster

    def __str__(self) -> str:
        return f"{self.level} {self.path}" if self.path else "the cluster"
