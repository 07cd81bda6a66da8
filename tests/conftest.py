"""Fixtures for every unit test.

`topogang explain` and `simulate` configure structlog for the process (a level filter, cached
loggers), as a command should; called in-process by a test, that configuration would outlive it
and silence the info-level events later tests capture (`structlog.testing.capture_logs`), in
this session's e2e tests too. Each test gets structlog back as it found it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _structlog_as_found() -> Iterator[None]:
    saved = structlog.get_config()
    yield
    structlog.reset_defaults()
    structlog.configure(**saved)
