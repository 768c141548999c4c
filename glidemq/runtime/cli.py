"""`glidemq-run`: parse flags, check the processor and the server, then supervise."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import orjson

from ..cli.support import unreachable
from ..client.connection import DEFAULT_URL, ConnectionOptions, has_password
from ..client.tls import glide_tls_settings
from ..errors import GlideMQError
from ..process.setup import run_as_child
from .config import ExitCode, RuntimeConfig, UsageError, parse_config
from .logs import setup_logging
from .secrets import PASSWORD_IN_ARGV, hide_secrets, read_url, url_flag

__all__ = ["main"]

log = logging.getLogger("glidemq.run")


def _connection(cfg: RuntimeConfig) -> ConnectionOptions:
    tls: dict[str, Any] = {
        key: value
        for key, value in (
            ("ca_file", cfg.tls_ca_file),
            ("cert_file", cfg.tls_cert_file),
            ("key_file", cfg.tls_key_file),
            ("server_name", cfg.tls_server_name),
            ("tls_insecure", cfg.tls_insecure),
        )
        if value
    }
    if tls:
        tls["tls"] = True
    if cfg.cluster:
        conn = ConnectionOptions.from_url(f"valkey://{cfg.cluster}?cluster=1", **tls)
    else:
        conn = ConnectionOptions.from_url(read_url(cfg) or DEFAULT_URL, **tls)
    glide_tls_settings(conn)  # an unreadable TLS file is a usage error, found now
    return _durable(cfg, conn)


def _durable(cfg: RuntimeConfig, conn: ConnectionOptions) -> ConnectionOptions:
    """`conn` with the durability the flags ask for (a bad combination: ValidationError)."""
    return conn.with_durability(
        cfg.durability, replicas=cfg.replicas, timeout_ms=cfg.durability_timeout_ms
    )


def _probe_in_child(cfg: RuntimeConfig, w: int) -> int:
    """The probe's body: load the processor, check the options, write the verdict to `w`."""
    code = 0
    try:
        from ..processor import load_processor

        spec = load_processor(cfg.target)
        if not (cfg.queues or spec.queues):
            raise UsageError(
                "no queue: pass --queue NAME or declare it with @glidemq.processor(queue=...)"
            )
        from .worker_process import _worker_options

        _worker_options(cfg, spec)  # flags and declared options together must be valid
        msg: dict[str, object] = {"ok": True, "schedules": [dict(s) for s in spec.schedules]}
    except BaseException as exc:
        code = ExitCode.USAGE
        msg = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": _user_trace(exc)}
        if isinstance(exc, ModuleNotFoundError) and _is_target_module(cfg.target, exc.name):
            msg["error"] = f"no module named {exc.name!r}{_path_hint()}"
            msg["usage"] = True
    os.write(w, orjson.dumps(msg))
    return code


_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_trace(exc: BaseException) -> str:
    """The traceback of `exc` without glidemq's and importlib's frames: what happened in the
    user's code ('' when none of it ran)."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith((_OWN_DIR + os.sep, "<frozen importlib"))
        and "/importlib/" not in f.filename
    ]
    if not frames:
        return ""
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    lines.extend(traceback.format_exception_only(type(exc), exc))
    return "".join(lines)


def _is_target_module(target: str, missing: str | None) -> bool:
    """Whether the module that is missing is the target's own (or a package of its path),
    not something the target imports."""
    module = target.partition(":")[0]
    if not missing or module.endswith(".py") or os.sep in module:
        return False
    return module == missing or module.startswith(missing + ".")


def _path_hint() -> str:
    where = os.environ.get("PYTHONPATH")
    searched = f"the working directory {os.getcwd()}"
    if where:
        searched += f" and PYTHONPATH={where}"
    return (
        f" (searched {searched}; run glidemq-run from the directory that holds it, "
        "or add that directory to PYTHONPATH)"
    )


def _probe_processor(cfg: RuntimeConfig) -> tuple[str | None, list[dict[str, Any]]]:
    """Import the processor in a throw-away child so the supervisor never imports user code
    (every worker imports it fresh, which is what makes SIGHUP reload it). Returns an error
    text (None when it is usable) and the schedulers its tasks declare."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child side, exercised by the CLI tests
        run_as_child(partial(_probe_in_child, cfg, w), error_code=ExitCode.USAGE, close=[r])
    os.close(w)
    chunks = []
    while True:
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    os.waitpid(pid, 0)
    try:
        reply = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError:
        return "the processor check crashed before reporting", []
    if reply.get("ok"):
        return None, list(reply.get("schedules", []))
    error = str(reply.get("error", ""))
    usage = error.startswith(("UsageError", "ValidationError", "TaskArgumentError"))
    if usage or reply.get("usage"):
        return error, []
    return f"{error}\n{reply.get('traceback', '')}".rstrip(), []


def _upsert_in_child(
    conn: ConnectionOptions, prefix: str, schedules: Sequence[Mapping[str, Any]]
) -> int:
    import asyncio

    from ..queue.queue import Queue

    async def upsert() -> None:
        queues: dict[str, Queue[Any, Any]] = {}
        try:
            for item in schedules:
                name = str(item["queue"])
                queue = queues.get(name)
                if queue is None:
                    queue = queues[name] = Queue(name, connection=conn, prefix=prefix)
                await queue.upsert_job_scheduler(
                    str(item["name"]), **item["options"], template=item["template"]
                )
                log.info("scheduler %s of queue %s is up to date", item["name"], name)
        finally:
            for queue in queues.values():
                await queue.close()

    try:
        asyncio.run(upsert())
    except GlideMQError as exc:
        print(f"glidemq-run: error: cannot upsert the schedules: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    return 0


def upsert_schedules(
    conn: ConnectionOptions, prefix: str, schedules: Sequence[Mapping[str, Any]]
) -> bool:
    """Create or update the schedulers the tasks declare, in a throw-away child (the
    supervisor keeps no client). Upserting an unchanged one keeps its next run, so however
    many glidemq-run start, each schedule fires once per tick. False when it failed."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child side, exercised by the CLI tests
        run_as_child(
            partial(_upsert_in_child, conn, prefix, schedules), error_code=ExitCode.INTERNAL
        )
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _wait_reachable(conn: ConnectionOptions, timeout: float) -> str | None:
    """TCP-connect to a server address, retrying with backoff for `timeout` seconds (a host
    that does not exist fails at once); an error text on failure."""

    def retrying(last: str, delay: float) -> None:
        log.warning("Valkey not reachable yet (%s); retrying in %.1f s", last, delay)

    return unreachable(
        conn.url, conn.addresses, wait=timeout, attempt_timeout=2.0, on_retry=retrying
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of glidemq-run; returns the exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        cfg = parse_config(args)
        if has_password(url_flag(args) or ""):
            print(PASSWORD_IN_ARGV, file=sys.stderr, flush=True)
        if argv is None:
            hide_secrets(cfg, args)  # returns only when there is nothing to hide
        tls_flags = (cfg.tls_ca_file, cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_server_name)
        if cfg.embedded and (any(tls_flags) or cfg.tls_insecure):
            raise UsageError("--embedded runs a server without TLS: drop the --tls-* options")
        conn = None if cfg.embedded else _connection(cfg)
    except (UsageError, GlideMQError) as exc:
        print(f"glidemq-run: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    setup_logging(cfg.log_format, cfg.log_level, "supervisor")
    server = None
    try:
        if cfg.embedded:
            from ..server.valkey import EmbeddedValkey, port_is_free

            wanted = cfg.embedded_port
            if wanted is not None and not port_is_free("127.0.0.1", wanted):
                print(
                    f"glidemq-run: error: --embedded-port {wanted}: the port is already in use",
                    file=sys.stderr,
                )
                return ExitCode.USAGE
            server = EmbeddedValkey(port=wanted).start()
            print(f"glidemq-run: embedded Valkey at {server.url}", file=sys.stderr, flush=True)
            conn = _durable(cfg, ConnectionOptions.from_url(server.url))
        assert conn is not None
        problem, schedules = _probe_processor(cfg)
        if problem is not None:
            print(
                f"glidemq-run: error: cannot use processor {cfg.target!r}: {problem}",
                file=sys.stderr,
            )
            return ExitCode.USAGE
        problem = _wait_reachable(conn, cfg.connect_timeout)
        if problem is not None:
            print(f"glidemq-run: error: {problem}", file=sys.stderr)
            return ExitCode.UNREACHABLE
        if schedules and not upsert_schedules(conn, cfg.prefix, schedules):
            return ExitCode.USAGE
        from .supervisor import Supervisor

        return Supervisor(cfg, conn).run()
    except GlideMQError as exc:
        print(f"glidemq-run: error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except Exception:
        log.exception("supervisor failed")
        return ExitCode.INTERNAL
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
