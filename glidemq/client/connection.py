"""Connection options and valkey-glide client creation (standalone and cluster)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol, TypeAlias
from urllib.parse import parse_qs, quote, unquote, urlsplit

from glide import (
    BackoffStrategy,
    GlideClient,
    GlideClientConfiguration,
    GlideClusterClient,
    GlideClusterClientConfiguration,
    InfoSection,
    Logger,
    LogLevel,
    NodeAddress,
    ServerCredentials,
)
from glide import GlideError as _GlideError

from ..errors import ConnectionError, UnsupportedOptionError, ValidationError
from ..options.durability import Durability, DurabilityLike, coerce_durability
from ..timing.clock import WALL_CLOCK, Clock
from .retry import DEFAULT_RETRY, RetryPolicy
from .tls import diagnose, glide_tls_settings

__all__ = [
    "Backend",
    "Client",
    "ConnectionOptions",
    "create_client",
    "has_password",
    "redact_url",
    "resolve_connection",
]

Client: TypeAlias = GlideClient | GlideClusterClient


class Backend(Protocol):
    """A server held in this process (glidemq.memory.MemoryServer) in place of an address:
    it makes the clients and brings the clock that queues on it read and sleep by."""

    @property
    def queue_clock(self) -> Clock:
        """The clock queues on this server read time from and sleep by."""
        ...

    async def connect(self, name: str | None) -> Any:
        """A new client of this server, with the valkey-glide client's methods."""
        ...


DEFAULT_URL = "valkey://127.0.0.1:6379"

# valkey-glide's own default (250 ms) would also cut off a slow FCALL that still ran on the
# server; a command client waits longer and treats the time-out as an error, not a retry.
DEFAULT_REQUEST_TIMEOUT_MS = 10_000
# How long the pre-connect check waits for a TCP answer before leaving it to the client.
_REFUSED_CHECK_TIMEOUT = 1.0

_quiet = False


def _quiet_native_logs() -> None:
    """Keep the Rust core's warnings off the console (once per process)."""
    global _quiet
    if not _quiet:
        Logger.set_logger_config(LogLevel.ERROR)
        _quiet = True


@dataclass(frozen=True)
class ConnectionOptions:
    """Where and how to reach Valkey.

    Build it directly, or from a URL with `ConnectionOptions.from_url`:
    `valkey://[user:password@]host:port[/db]`, `valkeys://` for TLS, several `host:port`
    separated by commas (or `?cluster=1`) for a cluster. `retry` says how failed calls are
    retried (`glidemq.client.retry`).

    TLS (`tls=True`): `ca_file` is a PEM file of the CAs to trust instead of the system's;
    `cert_file` and `key_file` a client certificate and its key (mutual TLS, re-read when
    the files change); `tls_insecure=True` skips certificate verification (tests only).
    `server_name` is accepted only when it equals every host: valkey-glide 2.6 verifies the
    certificate against the host it connects to and cannot be given another name.

    `durability`: "replicated" (every state change is acknowledged only once `replicas`
    replicas have it, WAIT), "fsync" (once the AOF has it on disk, WAITAOF), or None (the
    default: acknowledged by the primary alone). A confirmation that does not come within
    `durability_timeout_ms` raises DurabilityTimeoutError. See docs/DURABILITY.md.
    """

    addresses: tuple[tuple[str, int], ...] = (("127.0.0.1", 6379),)
    cluster: bool = False
    tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # keep secrets out of logs
    database: int = 0
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    client_name: str | None = None
    retry: RetryPolicy = field(default=DEFAULT_RETRY, compare=False, repr=False)
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None
    tls_insecure: bool = False
    backend: Backend | None = field(default=None, repr=False)
    """A server in this process instead of `addresses` (glidemq.memory)."""
    durability: DurabilityLike = None
    replicas: int | None = None
    durability_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        self._resolve_durability()
        if not self.addresses:
            raise ValidationError("addresses", "at least one host:port is required")
        for host, port in self.addresses:
            if not isinstance(host, str) or not host:
                raise ValidationError("addresses", f"bad host {host!r}")
            if not isinstance(port, int) or not 0 < port < 65536:
                raise ValidationError("addresses", f"bad port {port!r}")
        if self.request_timeout_ms <= 0:
            raise ValidationError("request_timeout_ms", "must be positive")
        if self.cluster and self.database != 0:
            raise ValidationError("database", "a cluster has only database 0")
        if not isinstance(self.retry, RetryPolicy):
            raise ValidationError("retry", "must be a glidemq.RetryPolicy")
        self._check_tls()

    def _resolve_durability(self) -> None:
        """`durability` as a Durability (from a mode name and the two numbers), or None;
        `replicas` and `durability_timeout_ms` then repeat what it says."""
        given: DurabilityLike = self.durability
        d = coerce_durability(given, replicas=self.replicas, timeout_ms=self.durability_timeout_ms)
        object.__setattr__(self, "durability", d)
        object.__setattr__(self, "replicas", None if d is None else d.replicas)
        object.__setattr__(self, "durability_timeout_ms", None if d is None else d.timeout_ms)
        if d is not None and self.backend is not None:
            raise UnsupportedOptionError(
                "durability", "needs a Valkey server (an in-process server has no replicas)"
            )

    @property
    def confirmation(self) -> Durability | None:
        """`durability` as checked: what the server must confirm before a write is
        acknowledged, or None."""
        d = self.durability
        assert d is None or isinstance(d, Durability)
        return d

    def with_durability(
        self,
        durability: DurabilityLike,
        *,
        replicas: int | None = None,
        timeout_ms: int | None = None,
    ) -> ConnectionOptions:
        """These options with another durability (None and no numbers: unchanged)."""
        if durability is None and replicas is None and timeout_ms is None:
            return self
        if durability is None:
            durability = self.confirmation
        d = coerce_durability(durability, replicas=replicas, timeout_ms=timeout_ms)
        return replace(self, durability=d, replicas=None, durability_timeout_ms=None)

    def _check_tls(self) -> None:
        settings = ("ca_file", "cert_file", "key_file", "server_name", "tls_insecure")
        for name in settings:
            if getattr(self, name) and not self.tls:
                raise ValidationError(name, "needs TLS: use a valkeys:// URL or tls=True")
        if bool(self.cert_file) != bool(self.key_file):
            missing = "key_file" if self.cert_file else "cert_file"
            raise ValidationError(
                missing, "cert_file and key_file go together (a client certificate and its key)"
            )
        if self.tls_insecure and self.ca_file:
            raise ValidationError(
                "tls_insecure", "skips certificate verification, so ca_file would be ignored"
            )
        if self.server_name and any(host != self.server_name for host, _ in self.addresses):
            raise UnsupportedOptionError(
                "server_name",
                "valkey-glide 2.6 verifies the certificate against the host it connects to "
                "and cannot be given another name: connect by the certificate's name "
                f"(valkeys://{self.server_name}:PORT)",
            )

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> ConnectionOptions:
        """Parse a `valkey://` or `valkeys://` URL (also `redis://`, `rediss://`)."""
        parts = urlsplit(url)
        shown = redact_url(url)  # error messages never repeat the password
        if parts.scheme not in ("valkey", "valkeys", "redis", "rediss"):
            if "://" not in url:  # a bare host:port
                raise ValidationError(
                    "url", f"{shown!r} has no scheme: write it as 'valkey://{shown}'"
                )
            raise ValidationError("url", f"unsupported scheme {parts.scheme!r} in {shown!r}")
        username, password, addresses = _url_netloc(parts.netloc, shown)
        query = parse_qs(parts.query)
        cluster = len(addresses) > 1 or query.get("cluster", ["0"])[0] in ("1", "true", "yes")
        path = parts.path.strip("/")
        try:
            database = int(path) if path else 0
        except ValueError:
            raise ValidationError("url", f"bad database number {path!r}") from None
        kwargs: dict[str, Any] = {
            "addresses": tuple(addresses),
            "cluster": cluster,
            "tls": parts.scheme in ("valkeys", "rediss"),
            "username": username,
            "password": password,
            "database": database,
        }
        kwargs.update(_url_query(query, shown))
        known = {f.name for f in fields(cls)}
        for key in overrides:
            if key not in known:
                raise ValidationError(key, "unknown connection option")
        kwargs.update(overrides)
        return cls(**kwargs)

    @property
    def clock(self) -> Clock:
        """The clock of the server: its backend's, or the wall clock."""
        return WALL_CLOCK if self.backend is None else self.backend.queue_clock

    @property
    def where(self) -> str | None:
        """The server's addresses as text (`127.0.0.1:6379`), for messages; None for a
        server in this process."""
        if self.backend is not None:
            return None
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.addresses)

    @property
    def url(self) -> str:
        """A URL that `from_url` turns back into equal options (without the password)."""
        if self.backend is not None:
            return f"memory://{self.backend!r}"
        scheme = "valkeys" if self.tls else "valkey"
        user = f"{quote(self.username, safe='')}@" if self.username else ""
        hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.addresses)
        query = []
        if self.cluster and len(self.addresses) == 1:
            query.append("cluster=1")
        if self.request_timeout_ms != DEFAULT_REQUEST_TIMEOUT_MS:
            query.append(f"timeout_ms={self.request_timeout_ms}")
        for key in ("ca_file", "cert_file", "key_file", "server_name"):
            value = getattr(self, key)
            if value:
                query.append(f"{key}={quote(value, safe='/')}")
        if self.tls_insecure:
            query.append("tls_insecure=1")
        d = self.confirmation
        if d is not None:
            query.append(
                f"durability={d.mode}&replicas={d.wanted}&durability_timeout_ms={d.timeout_ms}"
            )
        db = f"/{self.database}" if self.database else ""
        suffix = f"?{'&'.join(query)}" if query else ""
        return f"{scheme}://{user}{hosts}{db}{suffix}"


def redact_url(url: str) -> str:
    """`url` with its password (if any) replaced by `***`, for messages and logs."""
    netloc = urlsplit(url).netloc
    cred, at, hosts = netloc.rpartition("@")
    if not at or ":" not in cred:
        return url
    return url.replace(netloc, f"{cred.split(':', 1)[0]}:***@{hosts}", 1)


def has_password(url: str) -> bool:
    """Whether a connection URL carries a password."""
    return redact_url(url) != url


ConnectionLike: TypeAlias = ConnectionOptions | str | None


def resolve_connection(connection: ConnectionLike) -> ConnectionOptions:
    """Options from options, a URL, or (None) the `GLIDEMQ_URL` environment variable."""
    if isinstance(connection, ConnectionOptions):
        return connection
    if connection is None:
        connection = os.environ.get("GLIDEMQ_URL", DEFAULT_URL)
    if isinstance(connection, str):
        return ConnectionOptions.from_url(connection)
    raise ValidationError(
        "connection", f"expected ConnectionOptions or a URL, got {type(connection).__name__}"
    )


async def _refused(addresses: tuple[tuple[str, int], ...]) -> str | None:
    """The addresses, when every one refuses a TCP connection; else None.

    valkey-glide retries a refused connection until its connection timeout and then reports
    "timed out"; a refusal arrives at once, so checking first names the real cause without
    the wait. Any other outcome (accepted, unreachable, slow) is left to the client.
    """
    refused = []
    for host, port in addresses:
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), _REFUSED_CHECK_TIMEOUT
            )
        except ConnectionRefusedError:
            refused.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
            continue
        except (OSError, TimeoutError):
            return None
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return None
    return ", ".join(refused)


def _url_netloc(netloc: str, shown: str) -> tuple[str | None, str | None, list[tuple[str, int]]]:
    """A URL's user, password and `host:port` addresses (several for a cluster)."""
    username = password = None
    if "@" in netloc:
        cred, netloc = netloc.rsplit("@", 1)
        user, _, pw = cred.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if pw else None
    addresses: list[tuple[str, int]] = []
    for hostport in filter(None, netloc.split(",")):
        host, _, port = hostport.rpartition(":")
        if not host or hostport.endswith("]"):  # no port, or a bare [IPv6] address
            host, port = hostport, "6379"
        try:
            addresses.append((host.strip("[]"), int(port)))
        except ValueError:
            raise ValidationError("url", f"bad port in {hostport!r}") from None
    if not addresses:
        raise ValidationError("url", f"no host in {shown!r}")
    return username, password, addresses


def _url_query(query: dict[str, list[str]], shown: str) -> dict[str, Any]:
    """The connection options a URL's query sets (timeout_ms, the TLS files and flags,
    durability with replicas and durability_timeout_ms)."""
    out: dict[str, Any] = {}
    if "timeout_ms" in query:
        try:
            out["request_timeout_ms"] = int(query["timeout_ms"][0])
        except ValueError:
            raise ValidationError("url", f"bad timeout_ms in {shown!r}") from None
    for key in ("ca_file", "cert_file", "key_file", "server_name"):
        if key in query:
            out[key] = query[key][0]
    if "durability" in query:
        out["durability"] = query["durability"][0]
    for key in ("replicas", "durability_timeout_ms"):
        if key in query:
            try:
                out[key] = int(query[key][0])
            except ValueError:
                raise ValidationError("url", f"bad {key} in {shown!r}") from None
    if "tls_insecure" in query:
        flag = query["tls_insecure"][0].lower()
        if flag not in ("1", "true", "yes", "0", "false", "no"):
            raise ValidationError("tls_insecure", f"expected 1/true/yes or 0/false/no in {shown!r}")
        out["tls_insecure"] = flag in ("1", "true", "yes")
    return out


def client_name_of(name: str | None) -> str | None:
    """`name` as the server takes a client name (CLIENT SETNAME: printable ASCII, no
    spaces): any other character percent-encoded, so a queue named "队列" connects too."""
    if name is None:
        return None
    return quote(name, safe="".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%"))


async def create_client(opts: ConnectionOptions, *, name: str | None = None) -> Client:
    """Connect a new valkey-glide client. Blocking readers must get a client of their own.
    Raises glidemq.ConnectionError (saying "connection refused" when that is the cause)."""
    if opts.backend is not None:
        client: Client = await opts.backend.connect(client_name_of(name or opts.client_name))
        return client
    _quiet_native_logs()
    refused = await _refused(opts.addresses)
    if refused is not None:
        why = f"connection refused by {refused} ({ConnectionError.REFUSED_HINT})"
        raise ConnectionError(f"cannot connect to {opts.url}: {why}")
    glide_tls_settings(opts)  # an unreadable TLS file fails here, before any try
    for attempt in range(_CONNECT_TRIES):
        try:
            return await _create(opts, name)
        except _GlideError as exc:  # ConnectionError, ClosingError and the rest
            if attempt + 1 < _CONNECT_TRIES and connect_timed_out(exc):
                # a busy machine or a cluster still settling: the server is there (it did not
                # refuse), so try again before calling it unreachable
                await asyncio.sleep(_CONNECT_PAUSE_S * (attempt + 1))
                continue
            why = str(exc).strip()
            if opts.tls:
                found = await asyncio.to_thread(diagnose, opts)
                if found is not None:
                    why = f"{found}; the client said: {why}"
            if opts.cluster:
                found = await _not_a_cluster(opts)
                if found is not None:
                    why = f"{found}; the client said: {why}"
            raise ConnectionError(f"cannot connect to {opts.url}: {why}") from exc
    raise AssertionError("unreachable")  # the last attempt returns or raises


async def _not_a_cluster(opts: ConnectionOptions) -> str | None:
    """After a cluster client could not connect: what a plain connection to the first
    address finds there, when it is a server without cluster mode (else None)."""
    host, port = opts.addresses[0]
    plain = dataclasses.replace(opts, addresses=((host, port),), cluster=False)
    try:
        client = await _create(plain, "glidemq-diagnose")
    except _GlideError:
        return None
    try:
        info = await client.info([InfoSection.CLUSTER])
    except _GlideError:
        return None
    finally:
        await close_client(client)
    text = info.decode(errors="replace") if isinstance(info, bytes) else str(info)
    if "cluster_enabled:0" not in text:
        return None
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return (
        f"the URL asks for a cluster (several addresses or ?cluster=1), but {where} is a "
        "standalone server (INFO cluster says cluster_enabled:0): drop ?cluster=1 and give "
        "one address, or point the URL at a node of a cluster"
    )


_CONNECT_TRIES = 3
_CONNECT_PAUSE_S = 0.25


def connect_timed_out(exc: BaseException) -> bool:
    """Whether a client's creation failed by a time-out (not a refusal or a bad setting)."""
    return "timed out" in str(exc).lower()


def client_configuration(
    opts: ConnectionOptions, *, name: str | None = None
) -> GlideClientConfiguration | GlideClusterClientConfiguration:
    """The valkey-glide configuration of a client of `opts` (shared by the async client and
    the sync one, `glide_sync`). Raises ValidationError for an unreadable TLS file."""
    addresses = [NodeAddress(h, p) for h, p in opts.addresses]
    credentials = (
        ServerCredentials(password=opts.password, username=opts.username)
        if opts.password is not None
        else None
    )
    client_name = client_name_of(name or opts.client_name)
    # Reconnect forever with capped backoff: a server restart must not kill a worker.
    reconnect = BackoffStrategy(num_of_retries=12, factor=50, exponent_base=2)
    common: dict[str, Any] = {
        "use_tls": opts.tls,
        "credentials": credentials,
        "request_timeout": opts.request_timeout_ms,
        "reconnect_strategy": reconnect,
        "client_name": client_name,
        **opts.extra,
        **glide_tls_settings(opts),
    }
    if opts.cluster:
        return GlideClusterClientConfiguration(addresses, **common)
    return GlideClientConfiguration(addresses, database_id=opts.database or None, **common)


async def _create(opts: ConnectionOptions, name: str | None) -> Client:
    """One valkey-glide client of `opts` (raises what valkey-glide raises)."""
    config = client_configuration(opts, name=name)
    if isinstance(config, GlideClusterClientConfiguration):
        return await GlideClusterClient.create(config)
    return await GlideClient.create(config)


async def close_client(client: Client | None) -> None:
    """Close a client, ignoring errors from one that is already closed."""
    if client is None:
        return
    with contextlib.suppress(_GlideError):
        await client.close()
