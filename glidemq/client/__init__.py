"""Reaching the server: connection options and valkey-glide clients, TLS, when a failed call
is tried again, the function library and its loading, `QueueContext` (one queue on one
connection, where every call and batch is sent), replacing silent clients, tracing."""
