"""Read Kubernetes objects from files, directories or stdin, remembering where each came from.

YAML that cannot be read, or an object the API server would refuse (a Pod with a malformed
quantity, a Node without a name), stops the simulation with a message that names the file and
line. A key written twice in one mapping is such YAML: `kubectl apply` refuses it, and reading
it as PyYAML does (the last one wins) would drop the first silently (a second `annotations:`
block, or two objects run together where a `---` is missing). Objects that are well-formed but
wrong for topogang (an invalid PodGroup) are loaded and reported in the results instead, as the
server would report them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode

EXTENSIONS = (".yaml", ".yml", ".json")


class InputError(Exception):
    """Input that cannot be read: the message names the file (and line)."""


@dataclass(frozen=True)
class Source:
    path: str
    line: int  # 1-based line where the document starts

    def __str__(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class Loaded:
    body: Mapping[str, Any]
    source: Source

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", ""))

    @property
    def api_version(self) -> str:
        return str(self.body.get("apiVersion", ""))


def _files_below(root: Path) -> list[Path]:
    """The YAML and JSON files in ROOT and its subfolders, in the order `kubectl apply -R` reads
    them (by path); hidden files and folders (.git) are skipped, symbolic links to folders not
    followed (a link back up would never end)."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [Path(folder, f) for f in files if not f.startswith(".") and Path(f).suffix in EXTENSIONS]
    return sorted((f for f in found if f.is_file()), key=lambda f: f.relative_to(root).parts)


def expand(paths: Sequence[str]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if p == "-":
            out.append(p)
            continue
        path = Path(p)
        if path.is_dir():
            files = _files_below(path)
            if not files:
                raise InputError(f"{p}: no {', '.join(EXTENSIONS)} files in this directory or below")
            out.extend(str(f) for f in files)
        elif path.is_file():
            out.append(p)
        else:
            raise InputError(f"{p}: no such file or directory")
    return out


MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key written twice in one mapping, at any depth, as the YAML
    spec and `kubectl apply` do (PyYAML keeps the last one)."""

    _root: Node | None = None  # the document being read: a clash there is two objects run together

    def construct_document(self, node: Node) -> Any:
        self._root = node
        return super().construct_document(node)

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, MappingNode):
            seen: dict[str, int] = {}
            for key_node, _ in node.value:
                # `<<` merges are overridden by design; only keys written here can clash
                if key_node.tag == MERGE_TAG or not isinstance(key_node, ScalarNode):
                    continue
                key, line = str(key_node.value), key_node.start_mark.line + 1
                if key in seen:
                    hint = " (a --- missing between two objects?)" if node is self._root else ""
                    problem = f'mapping key "{key}" already defined at line {seen[key]}{hint}'
                    raise ConstructorError(None, None, problem, key_node.start_mark)
                seen[key] = line
        return super().construct_mapping(node, deep)


def _documents(text: str, name: str) -> Iterator[tuple[Any, int]]:
    loader = _StrictLoader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            yield loader.construct_document(node), node.start_mark.line + 1
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        raise InputError(f"{where}: not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{name}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def load(paths: Sequence[str]) -> list[Loaded]:
    """Every object in the order read; `List` objects are opened into their items."""
    out: list[Loaded] = []
    for name in expand(paths):
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{name}: cannot read: {exc}") from None
        shown = "<stdin>" if name == "-" else name
        for doc, line in _documents(text, shown):
            if doc is None:
                continue
            if not isinstance(doc, Mapping):
                raise InputError(f"{shown}:{line}: expected a Kubernetes object (a mapping), got {type(doc).__name__}")
            items = doc.get("items") if str(doc.get("kind", "")).endswith("List") else None
            if isinstance(items, list):
                for i, item in enumerate(items):
                    if not isinstance(item, Mapping):
                        raise InputError(f"{shown}:{line}: items[{i}]: expected a Kubernetes object")
                    out.append(Loaded(item, Source(shown, line)))
                continue
            if not doc.get("kind"):
                raise InputError(f"{shown}:{line}: the object has no kind")
            out.append(Loaded(doc, Source(shown, line)))
    return out
