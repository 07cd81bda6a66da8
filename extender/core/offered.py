"""The node names kube-scheduler offered in one call, asked about one node at a time.

A call carries up to every node's name (5,000 here); "is the planned node offered?" is a scan
of that list, and one steered call asks it of the same node up to three times (the plan lost?
traded? nominated?). Each scan of 5,000 names costs about as much as the rest of the core's
call, so the answer is kept for the last node asked. A set would cost more: hashing every name
is slower than one scan.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload


class Offered(Sequence[str]):
    __slots__ = ("_answer", "_asked", "_names")

    def __init__(self, names: Sequence[str]) -> None:
        self._names = names
        self._asked: object = None
        self._answer = False

    def __contains__(self, node: object) -> bool:
        if node != self._asked:
            self._asked, self._answer = node, node in self._names
        return self._answer

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._names[index]
