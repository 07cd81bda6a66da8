"""GroupKey: a namespaced object's identity. Gangs and pods are keyed "namespace/name" as text;
this is the one place that text is taken apart."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class GroupKey:
    namespace: str
    name: str

    @classmethod
    def parse(cls, key: str) -> GroupKey:
        """'ml/train' -> GroupKey('ml', 'train'); a key without a namespace has namespace ''."""
        namespace, sep, name = key.partition("/")
        return cls(namespace, name) if sep else cls("", namespace)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
