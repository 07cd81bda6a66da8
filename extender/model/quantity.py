"""Kubernetes resource quantities ("500m", "16Gi", "1e3") as integers in milli-units.

Every resource is kept in milli-units, rounded up, so cpu ("250m" -> 250), memory ("1Ki" ->
1_024_000) and extended resources ("8" -> 8000) share one exact integer arithmetic.
"""

from __future__ import annotations

import re
from decimal import ROUND_CEILING, Decimal, InvalidOperation

from extender.model.limits import MAX_QUANTITY_MILLI
from extender.model.raw import literal

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


# Parsed quantity texts: a cluster uses a few ("1", "8", "500m", "16Gi"), and every pod event
# is parsed again (a quarter of parse_pod's time). Bounded in entries and in text length.
_PARSED: dict[str, int] = {}
PARSED_MAX_ENTRIES = 4096
PARSED_MAX_TEXT = 32


def parse_quantity(value: object) -> int:
    """Return the quantity in milli-units, rounded up; raise QuantityError when malformed or
    past an int64 of milli-units (so "1e999999999" never becomes a billion-digit integer)."""
    text = value if type(value) is str else None
    if text is not None:
        known = _PARSED.get(text)
        if known is not None:
            return known
    milli = _milli(value)
    if abs(milli) > MAX_QUANTITY_MILLI:
        raise QuantityError(f"{literal(value)} is too large: at most {MAX_QUANTITY_MILLI // 1000:,}")
    if text is not None and len(text) <= PARSED_MAX_TEXT and len(_PARSED) < PARSED_MAX_ENTRIES:
        _PARSED[text] = milli
    return milli


def parse_nonnegative(value: object) -> int:
    """A quantity that cannot be below zero (capacity, allocatable, a request)."""
    milli = parse_quantity(value)
    if milli < 0:
        raise QuantityError(f"expected a quantity >= 0, got {literal(value)}")
    return milli


def _milli(value: object) -> int:
    if isinstance(value, bool):
        raise QuantityError(f"expected a quantity such as '8', '500m' or '16Gi', got {literal(value)}")
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        value = repr(value)
    if not isinstance(value, str):
        raise QuantityError(f"expected a quantity such as '8', '500m' or '16Gi', got {literal(value)}")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise QuantityError(f"expected a quantity such as '8', '500m' or '16Gi', got {literal(value)}")
    try:
        number = Decimal(match["num"])
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid decimals
        raise QuantityError(f"not a number: {value!r}") from exc
    suffix = match["suffix"] or ""
    too_large = f"{literal(value)} is too large: at most {MAX_QUANTITY_MILLI // 1000:,}"
    try:
        if suffix in _BINARY:
            scaled = number * _BINARY[suffix]
        elif suffix in _DECIMAL:
            scaled = number * _DECIMAL[suffix]
        else:  # exponent form, e.g. "1e3"
            scaled = number * (Decimal(10) ** int(suffix[1:]))
        milli = (scaled * 1000).to_integral_value(rounding=ROUND_CEILING)
    except (ArithmeticError, ValueError):  # decimal overflow, or an exponent of thousands of digits
        raise QuantityError(too_large) from None
    if abs(milli) > MAX_QUANTITY_MILLI:  # checked before int(): "1e999999" has a million digits
        raise QuantityError(too_large)
    return int(milli)


def format_quantity(resource: str, milli: int) -> str:
    """Render milli-units readably for messages: cpu in cores or m, memory in Gi/Mi, others plain."""
    if milli % 1000 != 0:
        return f"{milli}m"
    units = milli // 1000
    if resource in {"memory", "ephemeral-storage"} or resource.startswith("hugepages-"):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units >= size and units % size == 0:
                return f"{units // size}{suffix}"
    return str(units)
