"""glidemq-run settings: parsed from flags, each also settable by a GLIDEMQ_* variable."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..cli.argtypes import non_negative_float, non_negative_int, port, positive_int
from ..cli.support import EXIT_UNREACHABLE, Parser
from ..errors import ValidationError
from ..keys import validate_prefix, validate_queue_name

__all__ = ["ExitCode", "RuntimeConfig", "UsageError", "build_parser", "parse_config"]


class ExitCode:
    """Process exit codes of glidemq-run (documented in docs/RUNTIME.md)."""

    OK = 0  # drained cleanly
    INTERNAL = 1  # unexpected error in the supervisor
    USAGE = 2  # bad flag, bad processor: nothing was started
    BOOT = 3  # worker processes failed while starting (import error, crash at boot)
    IMMEDIATE = 4  # immediate shutdown (SIGQUIT, second SIGINT): jobs recovered by stall recovery
    GRACE_EXPIRED = 5  # some workers outlived --grace and were killed
    UNREACHABLE = EXIT_UNREACHABLE  # server unreachable at start: nothing was started


class UsageError(Exception):
    """Bad command-line input; the message says which flag and why."""


@dataclass(frozen=True)
class RuntimeConfig:
    """Everything glidemq-run was told. Times: seconds unless the name says ms."""

    target: str
    procs: int = field(default_factory=lambda: os.cpu_count() or 1)
    concurrency: int | None = None
    queues: tuple[str, ...] = ()
    url: str | None = None
    cluster: str | None = None
    embedded: bool = False
    embedded_port: int | None = None
    prefix: str = "glide"
    prefetch: int | None = None
    hold_window_ms: int | None = None
    batch_size: int | None = None
    batch_timeout_ms: int = 50
    lock_duration_ms: int | None = None
    stalled_interval_ms: int | None = None
    grace: float = 30.0
    max_jobs_per_child: int | None = None
    max_memory_per_child_mb: int | None = None
    heartbeat_timeout: float = 30.0
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    log_format: str = "text"
    log_level: str = "INFO"
    sandbox: bool = False
    status_interval: float = 10.0
    connect_timeout: float = 10.0
    url_file: str | None = None
    url_fd: int | None = None  # the URL on a pipe: how glidemq-run hands it to itself
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_server_name: str | None = None
    tls_insecure: bool = False
    durability: str | None = None
    replicas: int | None = None
    durability_timeout_ms: int | None = None


_EXAMPLES = """examples:
  glidemq-run app:process --queue emails --procs 4 --concurrency 50
  glidemq-run app:process --queue a --queue b --url valkey://10.0.0.5:6379
  glidemq-run app:process --queue q --cluster 10.0.0.5:7000,10.0.0.6:7000
  glidemq-run app:process --queue q --embedded          # local try-out, prints the address
  glidemq-run app:process --queue q --embedded --embedded-port 6400
  GLIDEMQ_PROCS=8 GLIDEMQ_URL=valkey://cache:6379 glidemq-run app:process --queue q
  glidemq-run app:process --queue q --url-file /run/secrets/valkey-url --tls-ca-file ca.pem

A password belongs in GLIDEMQ_URL or in a --url-file, not in --url: every local user can
read a command line.

signals: TERM/INT drain (second INT: immediate), QUIT immediate, HUP rolling restart,
TTIN/TTOU one process more/less. Every flag can also be set as GLIDEMQ_<FLAG>, e.g.
GLIDEMQ_MAX_JOBS_PER_CHILD=1000."""


def build_parser() -> argparse.ArgumentParser:
    """The glidemq-run argument parser."""
    from ..version import __version__

    p = Parser(
        prog="glidemq-run",
        description="Run a glidemq processor in several supervised worker processes.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # `--proc` is a typo, not `--procs`
    )
    p.add_argument(
        "target",
        metavar="MODULE:ATTR",
        help="the processor (app.jobs:process), one task (app.tasks:send) or every task of "
        "a module (app.tasks)",
    )
    p.add_argument("--version", action="version", version=f"glidemq-run {__version__}")
    p.add_argument("--procs", type=positive_int, help="worker processes (default: CPU count)")
    p.add_argument("--concurrency", type=positive_int, help="jobs at once per process")
    p.add_argument(
        "--queue",
        dest="queues",
        action="append",
        metavar="NAME",
        help="queue to work on (repeatable); required unless the processor declares it",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--url",
        help="valkey://host:port[/db] (valkeys:// for TLS); put a password in GLIDEMQ_URL or "
        "--url-file instead: a command line is visible to every local user",
    )
    where.add_argument(
        "--url-file", metavar="PATH", help="read the URL (with its password) from this file"
    )
    where.add_argument("--url-fd", type=int, help=argparse.SUPPRESS)
    where.add_argument("--cluster", metavar="HOST:PORT[,...]", help="cluster seed nodes")
    where.add_argument(
        "--embedded",
        action="store_true",
        help="start an embedded Valkey for local use and print its address",
    )
    p.add_argument(
        "--embedded-port",
        type=port,
        metavar="PORT",
        help="port of the --embedded Valkey (default: a free one)",
    )
    tls = p.add_argument_group("TLS (each implies TLS, as a valkeys:// URL does)")
    tls.add_argument("--tls-ca-file", metavar="PATH", help="PEM file of the CAs to trust")
    tls.add_argument("--tls-cert-file", metavar="PATH", help="client certificate (PEM)")
    tls.add_argument("--tls-key-file", metavar="PATH", help="key of the client certificate")
    tls.add_argument("--tls-server-name", metavar="NAME", help="name the certificate must carry")
    tls.add_argument(
        "--tls-insecure", action="store_true", help="do not verify the server's certificate"
    )
    durable = p.add_argument_group("durability (docs/DURABILITY.md)")
    durable.add_argument(
        "--durability",
        choices=("replicated", "fsync", "none"),
        help="acknowledge completions, failures and every other write only once replicas "
        "(WAIT) or the AOF (WAITAOF) confirmed them (default: none)",
    )
    durable.add_argument(
        "--replicas",
        type=non_negative_int,
        metavar="N",
        help="replicas that must confirm a write (default 1 with replicated, 0 with fsync)",
    )
    durable.add_argument(
        "--durability-timeout",
        type=positive_int,
        metavar="MS",
        help="how long a write waits for its confirmation (default 1000)",
    )
    p.add_argument("--prefix", help="key prefix (default: glide)")
    p.add_argument("--prefetch", type=positive_int, help="most jobs taken per fetch")
    p.add_argument(
        "--hold-window",
        type=non_negative_int,
        metavar="MS",
        help="hold about this much work beyond the concurrency while short jobs run, so the"
        " next starts without a round trip (default 20; 0: hold none)",
    )
    p.add_argument("--batch-size", type=positive_int, help="hand the processor lists of jobs")
    p.add_argument(
        "--batch-timeout",
        type=positive_int,
        metavar="MS",
        help="wait at most this long to fill a batch (default 50)",
    )
    p.add_argument(
        "--lock-duration",
        type=positive_int,
        metavar="MS",
        help="a job whose worker is silent this long is recovered by another",
    )
    p.add_argument(
        "--stalled-interval",
        type=positive_int,
        metavar="MS",
        help="how often each process looks for jobs of dead workers (default 30000)",
    )
    p.add_argument(
        "--grace",
        type=non_negative_float,
        metavar="SECONDS",
        help="how long a drain waits for running jobs (default 30)",
    )
    p.add_argument(
        "--max-jobs-per-child",
        type=positive_int,
        metavar="N",
        help="recycle a process after about N jobs (jittered by up to 10%%)",
    )
    p.add_argument(
        "--max-memory-per-child",
        type=positive_int,
        metavar="MB",
        help="recycle a process whose RSS passes MB",
    )
    p.add_argument(
        "--heartbeat-timeout",
        type=non_negative_float,
        metavar="SECONDS",
        help="kill and replace a process silent this long (default 30)",
    )
    p.add_argument("--metrics-port", type=port, help="serve /metrics and /health on this port")
    p.add_argument("--metrics-host", help="address for the metrics server (default 127.0.0.1)")
    p.add_argument("--log-format", choices=("text", "json"), help="log format (default text)")
    p.add_argument(
        "--log-level",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        type=str.upper,
        help="log level (default INFO)",
    )
    p.add_argument(
        "--status-interval",
        type=non_negative_float,
        metavar="SECONDS",
        help="status line interval on a terminal, 0 for none (default 10)",
    )
    p.add_argument(
        "--connect-timeout",
        type=non_negative_float,
        metavar="SECONDS",
        help="how long to wait for the server at start (default 10)",
    )
    p.add_argument(
        "--sandbox", action="store_true", help="run processors in sandboxed child processes"
    )
    return p


# flag name -> config field, for the GLIDEMQ_* environment variables
_ENV_FIELDS: dict[str, tuple[str, str]] = {
    "PROCS": ("procs", "int"),
    "CONCURRENCY": ("concurrency", "int"),
    "QUEUE": ("queues", "list"),
    "URL": ("url", "str"),
    "CLUSTER": ("cluster", "str"),
    "EMBEDDED": ("embedded", "bool"),
    "EMBEDDED_PORT": ("embedded_port", "int"),
    "PREFIX": ("prefix", "str"),
    "PREFETCH": ("prefetch", "int"),
    "HOLD_WINDOW": ("hold_window_ms", "int"),
    "BATCH_SIZE": ("batch_size", "int"),
    "BATCH_TIMEOUT": ("batch_timeout_ms", "int"),
    "LOCK_DURATION": ("lock_duration_ms", "int"),
    "STALLED_INTERVAL": ("stalled_interval_ms", "int"),
    "GRACE": ("grace", "float"),
    "MAX_JOBS_PER_CHILD": ("max_jobs_per_child", "int"),
    "MAX_MEMORY_PER_CHILD": ("max_memory_per_child_mb", "int"),
    "HEARTBEAT_TIMEOUT": ("heartbeat_timeout", "float"),
    "METRICS_PORT": ("metrics_port", "int"),
    "METRICS_HOST": ("metrics_host", "str"),
    "LOG_FORMAT": ("log_format", "str"),
    "LOG_LEVEL": ("log_level", "str"),
    "STATUS_INTERVAL": ("status_interval", "float"),
    "SANDBOX": ("sandbox", "bool"),
    "CONNECT_TIMEOUT": ("connect_timeout", "float"),
    "URL_FILE": ("url_file", "str"),
    "TLS_CA_FILE": ("tls_ca_file", "str"),
    "TLS_CERT_FILE": ("tls_cert_file", "str"),
    "TLS_KEY_FILE": ("tls_key_file", "str"),
    "TLS_SERVER_NAME": ("tls_server_name", "str"),
    "TLS_INSECURE": ("tls_insecure", "bool"),
    "DURABILITY": ("durability", "str"),
    "REPLICAS": ("replicas", "int"),
    "DURABILITY_TIMEOUT": ("durability_timeout_ms", "int"),
}

_ARG_FIELDS = {
    "procs": "procs",
    "concurrency": "concurrency",
    "queues": "queues",
    "url": "url",
    "cluster": "cluster",
    "embedded": "embedded",
    "embedded_port": "embedded_port",
    "prefix": "prefix",
    "prefetch": "prefetch",
    "hold_window": "hold_window_ms",
    "batch_size": "batch_size",
    "batch_timeout": "batch_timeout_ms",
    "lock_duration": "lock_duration_ms",
    "stalled_interval": "stalled_interval_ms",
    "grace": "grace",
    "max_jobs_per_child": "max_jobs_per_child",
    "max_memory_per_child": "max_memory_per_child_mb",
    "heartbeat_timeout": "heartbeat_timeout",
    "metrics_port": "metrics_port",
    "metrics_host": "metrics_host",
    "log_format": "log_format",
    "log_level": "log_level",
    "status_interval": "status_interval",
    "sandbox": "sandbox",
    "connect_timeout": "connect_timeout",
    "url_file": "url_file",
    "url_fd": "url_fd",
    "tls_ca_file": "tls_ca_file",
    "tls_cert_file": "tls_cert_file",
    "tls_key_file": "tls_key_file",
    "tls_server_name": "tls_server_name",
    "tls_insecure": "tls_insecure",
    "durability": "durability",
    "replicas": "replicas",
    "durability_timeout": "durability_timeout_ms",
}

_SERVER_FIELDS = ("url", "url_file", "url_fd", "cluster", "embedded")


def _from_env(env: Mapping[str, str]) -> dict[str, object]:
    values: dict[str, object] = {}
    for name, (fld, kind) in _ENV_FIELDS.items():
        raw = env.get(f"GLIDEMQ_{name}")
        if raw is None or raw == "":
            continue
        try:
            if kind == "int":
                values[fld] = int(raw)
            elif kind == "float":
                values[fld] = float(raw)
            elif kind == "bool":
                if raw.lower() not in ("1", "true", "yes", "0", "false", "no"):
                    raise ValueError(raw)
                values[fld] = raw.lower() in ("1", "true", "yes")
            elif kind == "list":
                values[fld] = tuple(x.strip() for x in raw.split(",") if x.strip())
            else:
                values[fld] = raw
        except ValueError:
            raise UsageError(f"GLIDEMQ_{name}={raw!r}: expected {kind}") from None
    return values


def parse_config(argv: Sequence[str], env: Mapping[str, str] | None = None) -> RuntimeConfig:
    """Flags over environment over defaults. Raises UsageError (or SystemExit from argparse)."""
    env = os.environ if env is None else env
    args = build_parser().parse_args(list(argv))
    values = _merged(args, _from_env(env))
    cfg = RuntimeConfig(target=args.target, **values)  # type: ignore[arg-type]
    _check_numbers(cfg)
    _check_names(cfg)
    return cfg


def _merged(args: argparse.Namespace, values: dict[str, object]) -> dict[str, object]:
    """The environment's values with the flags over them; one way to name the server."""
    if any(getattr(args, a) not in (None, False) for a in _SERVER_FIELDS):
        for key in _SERVER_FIELDS:
            values.pop(key, None)  # a flag chooses the server; the environment does not mix in
        if not args.embedded:
            values.pop("embedded_port", None)
    for attr, fld in _ARG_FIELDS.items():
        value = getattr(args, attr)
        if value is None or value is False:
            continue
        values[fld] = tuple(value) if attr == "queues" else value
    chosen = [k for k in _SERVER_FIELDS if values.get(k) not in (None, False)]
    if len(chosen) > 1:
        got = ", ".join(chosen)
        raise UsageError(f"choose one of --url, --url-file, --cluster, --embedded (got {got})")
    if values.get("embedded_port") is not None and not values.get("embedded"):
        raise UsageError("--embedded-port needs --embedded")
    return values


def _check_numbers(cfg: RuntimeConfig) -> None:
    if cfg.hold_window_ms is not None and cfg.hold_window_ms < 0:
        raise UsageError(f"--hold-window must be >= 0, got {cfg.hold_window_ms}")
    for name in (
        "procs",
        "concurrency",
        "prefetch",
        "batch_size",
        "max_jobs_per_child",
        "max_memory_per_child_mb",
        "lock_duration_ms",
        "stalled_interval_ms",
    ):
        v = getattr(cfg, name)
        if v is not None and v < 1:
            flag = name.removesuffix("_ms").removesuffix("_mb").replace("_", "-")
            raise UsageError(f"--{flag}: must be >= 1, got {v}")
    for name, low in (("lock_duration_ms", 100), ("stalled_interval_ms", 50)):
        v = getattr(cfg, name)
        if v is not None and v < low:
            flag = name.removesuffix("_ms").replace("_", "-")
            raise UsageError(f"--{flag}: must be >= {low} ms, got {v}")


def _check_names(cfg: RuntimeConfig) -> None:
    for name in cfg.queues:
        try:
            validate_queue_name(name)
        except ValidationError as exc:
            raise UsageError(f"--queue {name!r}: {exc.reason}") from None
    try:
        validate_prefix(cfg.prefix)
    except ValidationError as exc:
        raise UsageError(f"--prefix: {exc.reason}") from None
    if cfg.log_format not in ("text", "json"):
        raise UsageError(f"--log-format: text or json, got {cfg.log_format!r}")
    if cfg.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise UsageError(f"--log-level: DEBUG, INFO, WARNING or ERROR, got {cfg.log_level!r}")
