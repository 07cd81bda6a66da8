"""The flags of room reservations and waiting of `topogang serve` read (settings.py is their
table): --reservations, --reserve-after, --reserve-order, --reserve-level, --max-wait and
--estimate-gangs and --estimates-per-pass."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from extender.core.reservations import Settings as ReservationSettings
from extender.model.max_wait import EXPECTED, MAX_WAIT_ANNOTATION, max_wait
from extender.server.settings_error import SettingsError, whole_number

RESERVATION_DEFAULTS = ReservationSettings()
MAX_RESERVATIONS = 64  # each costs a pass of vector counts per sweep: bounded
MAX_ESTIMATES = 1000  # a walk of them is spread over passes (--estimates-per-pass): bounded so estimates stay fresh
RESERVE_ORDERS = ("queue", "largest")
# A node label key (an optional DNS-subdomain prefix and a name of up to 63 characters) or a
# level's short name or alias: what TopologySpec.resolve accepts.
LEVEL_NAME = re.compile(r"(?:[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def reservations(
    args: argparse.Namespace, pick: Callable[..., str | None], seconds: Callable[[str, str | None, str, float], float]
) -> tuple[int, float, bool, str | None]:
    """--reservations (a whole number, bounded), --reserve-after (seconds), --reserve-order
    (whether the slots go to the largest gangs first) and --reserve-level (a level's name)."""
    text = pick(args.reservations, "TOPOGANG_RESERVATIONS")
    limit = whole_number("--reservations", "TOPOGANG_RESERVATIONS", text, MAX_RESERVATIONS, RESERVATION_DEFAULTS.limit)
    after = seconds("--reserve-after", args.reserve_after, "TOPOGANG_RESERVE_AFTER", RESERVATION_DEFAULTS.reserve_after)
    order = (pick(args.reserve_order, "TOPOGANG_RESERVE_ORDER") or "queue").strip().lower()
    if order not in RESERVE_ORDERS:
        raise SettingsError(f"--reserve-order (TOPOGANG_RESERVE_ORDER): expected queue or largest, got {order!r}")
    level = pick(args.reserve_level, "TOPOGANG_RESERVE_LEVEL")
    if level is not None and not LEVEL_NAME.fullmatch(level):
        raise SettingsError(
            "--reserve-level (TOPOGANG_RESERVE_LEVEL): expected a topology level's node label or short name"
            f" such as topology.kubernetes.io/zone or zone, got {level!r}"
        )
    return limit, after, order == "largest", level


def max_wait_flag(text: str | None) -> float | None:
    """--max-wait: off, or a duration with units, read as the annotation is (model/max_wait.py)."""
    if text is None or text.strip().lower() == "off":
        return None
    seconds, problem = max_wait({MAX_WAIT_ANNOTATION: text}, "--max-wait")
    if problem is not None:
        raise SettingsError(f"--max-wait (TOPOGANG_MAX_WAIT): expected off or {EXPECTED}, got {text!r}")
    return seconds


def estimate_gangs(text: str | None) -> int:
    """--estimate-gangs: a whole number, bounded."""
    return whole_number(
        "--estimate-gangs", "TOPOGANG_ESTIMATE_GANGS", text, MAX_ESTIMATES, RESERVATION_DEFAULTS.estimates
    )


def estimates_per_pass(text: str | None) -> int:
    """--estimates-per-pass: a whole number, bounded (0: the whole walk in every pass)."""
    default = RESERVATION_DEFAULTS.estimates_per_pass
    return whole_number("--estimates-per-pass", "TOPOGANG_ESTIMATES_PER_PASS", text, MAX_ESTIMATES, default)
