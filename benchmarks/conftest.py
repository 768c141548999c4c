"""Fixtures for the micro-benchmarks (real embedded Valkey, like the tests)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from glidemq.server.valkey import EmbeddedValkey


@pytest.fixture(scope="session")
def valkey() -> Iterator[EmbeddedValkey]:
    with EmbeddedValkey() as server:
        yield server
