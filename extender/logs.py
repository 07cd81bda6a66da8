"""structlog set-up: one JSON object per line when not on a terminal, readable lines when on one.

Every placement decision is one line (see extender.core.decisions.PlanEvent.fields); this module
only decides the format and the level.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO, cast

import structlog

LEVELS = ("debug", "info", "warning", "error")


class _Stderr:
    """Whatever sys.stderr is when a line is written, not when logging was configured (a
    replaced stream, such as a test's capture, may be closed by then)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "info", fmt: str = "auto", *, cache: bool = True) -> None:
    """fmt: "json", "console", or "auto" (JSON unless stderr is a terminal). CACHE: loggers keep
    this configuration once used (fast; for a long-running server)."""
    if level not in LEVELS:
        raise ValueError(f"log level: expected one of {', '.join(LEVELS)}, got {level!r}")
    if fmt not in ("json", "console", "auto"):
        raise ValueError(f"log format: expected json, console or auto, got {fmt!r}")
    as_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, _Stderr())),
        cache_logger_on_first_use=cache,
    )
