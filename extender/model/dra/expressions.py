"""CEL device selectors, evaluated with the `common-expression-language` package (module `cel`:
Python bindings of a Rust CEL interpreter; chosen over the pure-Python cel-python for a compiled
program that runs in ~25 µs instead of ~300 µs, see docs/development.md).

Kubernetes evaluates selectors with its own CEL environment: a `device` variable with `driver`,
`attributes`, `capacity` and `allowMultipleAllocations`, plus Kubernetes' libraries (quantity,
semver, cel.bind, optionals...). This interpreter has the core language only. So a selector
gets one of three answers:

- True / False: the interpreter evaluated it;
- `Unsupported`: valid CEL we cannot evaluate (a Kubernetes library function, an optional, a
  runtime error): the pod is planned without counting that request, and kube-scheduler's own
  DynamicResources filter has the last word, never a guess passed off as an answer;
- `Invalid`: not CEL at all (a syntax error), which the API server would have refused: bad input.

Compiled programs are kept per expression; a verdict is kept per expression and what of the
device it can read (the attributes and capacities whose names it holds; everything when it
iterates or passes on a whole map), so ten thousand nodes of the same GPU, each with its own
UUID attribute, cost one evaluation.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from extender.model.dra.slices import Device


def _load_cel() -> Any:
    """The package's compiled CEL module (`cel.cel`) alone. `import cel` also imports its
    command-line tool (typer, rich, prompt_toolkit: 20 MB of resident memory the server does
    not need); when the compiled module cannot be found alone, that import is the fallback."""
    spec = importlib.util.find_spec("cel")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        for path in sorted(Path(folder).glob("cel.*.so")) + sorted(Path(folder).glob("cel.*.pyd")):
            found = importlib.util.spec_from_file_location("cel.cel", path)
            if found is not None and found.loader is not None:
                module = importlib.util.module_from_spec(found)
                found.loader.exec_module(module)
                return module
    return importlib.import_module("cel")  # a layout without the compiled module beside the package


cel = _load_cel()

MAX_EXPRESSION = 10 * 1024  # resource.k8s.io/v1: CELSelectorExpressionMaxLength
_DOMAINS = re.compile(r"""device\.(attributes|capacity)\[\s*(["'])([^"']+)\2\s*\]""")
_CACHE = 65_536


@dataclass(frozen=True, slots=True)
class Unsupported:
    expression: str
    reason: str


@dataclass(frozen=True, slots=True)
class Invalid:
    expression: str
    reason: str


Verdict = bool | Unsupported | Invalid


@lru_cache(maxsize=4096)
def _compile(expression: str) -> Any:
    """A compiled program, or an Unsupported / Invalid verdict."""
    if len(expression) > MAX_EXPRESSION:
        return Invalid(expression, f"longer than {MAX_EXPRESSION} characters")
    try:
        return cel.compile(expression)
    except Exception as exc:  # the bindings raise ValueError for parse errors, others for the rest
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "Syntax error" in str(exc):
            return Invalid(expression, f"does not compile: {text}")
        return Unsupported(expression, f"not supported by topogang's CEL interpreter: {text}")


def check(expression: str) -> Invalid | Unsupported | None:
    """Whether EXPRESSION compiles: None when it does."""
    found = _compile(expression)
    return found if isinstance(found, Invalid | Unsupported) else None


def _value(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def activation(device: Device, expression: str) -> dict[str, object]:
    """`device` as Kubernetes shows it to a selector; a domain the expression names but the
    device lacks is an empty map, as Kubernetes makes it."""
    attributes: dict[str, dict[str, object]] = {}
    for domain, name, value in device.attributes:
        attributes.setdefault(domain, {})[name] = _value(value)
    capacity: dict[str, dict[str, object]] = {}
    for domain, name, milli in device.capacity:
        capacity.setdefault(domain, {})[name] = milli // 1000 if milli % 1000 == 0 else milli / 1000
    for kind, _, domain in _DOMAINS.findall(expression):
        (attributes if kind == "attributes" else capacity).setdefault(domain, {})
    return {
        "device": {
            "driver": device.driver,
            "attributes": attributes,
            "capacity": capacity,
            "allowMultipleAllocations": device.multiple,
        }
    }


_verdicts: dict[tuple[str, tuple[object, ...]], Verdict] = {}
_MAPS = re.compile(r"device\s*\.\s*(attributes|capacity)\b(\s*\[[^\]]*\])?")
_WALKS = re.compile(r"\b(exists|exists_one|all|map|filter|size)\s*\(|\bin\s+device\b")
_WORDS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=4096)
def _reads(expression: str) -> frozenset[str] | None:
    """The attribute and capacity names EXPRESSION can read (every word and string it holds), or
    None when it may read a whole map (iterates one, passes one on, compares one)."""
    if _WALKS.search(expression):
        return None
    for found in _MAPS.finditer(expression):
        rest = expression[found.end() :].lstrip()
        if found.group(2) is None or not rest.startswith((".", "[")):
            return None
    strings = re.findall(r"""["']([^"']*)["']""", expression)
    return frozenset(_WORDS.findall(expression)) | frozenset(strings)


def verdict_key(expression: str, device: Device) -> tuple[object, ...]:
    """What of DEVICE the expression can see: its verdict is shared by devices alike in that (a
    GPU's UUID does not make every device an evaluation of its own)."""
    reads = _reads(expression)
    if reads is None:
        return device.content
    return (
        device.driver,
        device.multiple,
        tuple(a for a in zip(device.names, device.values, strict=True) if a[0][1] in reads),
        tuple(c for c in device.capacity if c[1] in reads),
    )


def evaluate(expression: str, device: Device) -> Verdict:
    """The selector's verdict on DEVICE; devices alike in what it reads share it (bounded cache)."""
    key = (expression, verdict_key(expression, device))
    found = _verdicts.get(key)
    if found is None:
        found = _verdicts[key] = _run(expression, device)
        if len(_verdicts) > _CACHE:
            del _verdicts[next(iter(_verdicts))]
    return found


def _run(expression: str, device: Device) -> Verdict:
    program = _compile(expression)
    if isinstance(program, Invalid | Unsupported):
        return program
    try:
        result = program.execute(activation(device, expression))
    except Exception as exc:  # a runtime error: Kubernetes would abort the allocation too
        return Unsupported(expression, f"cannot be evaluated on device {device.name}: {exc}")
    if not isinstance(result, bool):
        return Invalid(expression, f"evaluates to {type(result).__name__}, not a boolean")
    return result


def all_match(expressions: Sequence[str], device: Device) -> Verdict:
    """Every expression holds (the first that does not, or that cannot be answered, decides)."""
    for expression in expressions:
        verdict = evaluate(expression, device)
        if verdict is not True:
            return verdict
    return True
