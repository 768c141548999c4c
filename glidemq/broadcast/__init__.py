"""Broadcasts: every subscription receives every message, each with its own retries, filtered
by subject."""

from __future__ import annotations

from .broadcast import Broadcast, BroadcastWorker, broadcast_key, subjects_key, subscription_queue

__all__ = ["Broadcast", "BroadcastWorker", "broadcast_key", "subjects_key", "subscription_queue"]
