"""TLS for the client connections: ConnectionOptions' TLS fields as valkey-glide's
configuration, and a plain-Python handshake that says why a TLS connection failed.

valkey-glide 2.6 reports a certificate it refuses as a connection time-out; when a TLS
connection fails, `diagnose` repeats the handshake with Python's `ssl` module and the same
trust settings, so the error names the real cause.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from glide import TlsAdvancedConfiguration

from ..errors import ValidationError

__all__ = ["TlsOptions", "diagnose", "glide_tls_settings"]


class TlsOptions(Protocol):
    """What TLS reads of the connection options (`glidemq.ConnectionOptions` has it all)."""

    @property
    def addresses(self) -> Sequence[tuple[str, int]]: ...
    @property
    def cluster(self) -> bool: ...
    @property
    def ca_file(self) -> str | None: ...
    @property
    def cert_file(self) -> str | None: ...
    @property
    def key_file(self) -> str | None: ...
    @property
    def tls_insecure(self) -> bool: ...
    @property
    def extra(self) -> Mapping[str, Any]: ...


def _readable(field: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ValidationError(field, f"cannot read {path}: {exc.strerror or exc}") from None
    if not data.strip():
        raise ValidationError(field, f"{path} is empty")
    return data


def glide_tls_settings(opts: TlsOptions) -> dict[str, Any]:
    """Keyword arguments for a valkey-glide client configuration (empty without TLS
    files or the insecure switch). Raises ValidationError for a file it cannot read."""
    if not (opts.ca_file or opts.cert_file or opts.tls_insecure):
        return {}
    if "advanced_config" in opts.extra:
        raise ValidationError(
            "extra", "advanced_config cannot be combined with ca_file, cert_file or tls_insecure"
        )
    roots = _readable("ca_file", opts.ca_file) if opts.ca_file else None
    if opts.cert_file and opts.key_file:
        _readable("cert_file", opts.cert_file)  # read again by the client on connect
        _readable("key_file", opts.key_file)
    tls = TlsAdvancedConfiguration(
        use_insecure_tls=True if opts.tls_insecure else None,
        root_pem_cacerts=roots,
        client_cert_path=opts.cert_file,
        client_key_path=opts.key_file,
    )
    from glide import AdvancedGlideClientConfiguration, AdvancedGlideClusterClientConfiguration

    advanced = (
        AdvancedGlideClusterClientConfiguration(tls_config=tls)
        if opts.cluster
        else AdvancedGlideClientConfiguration(tls_config=tls)
    )
    return {"advanced_config": advanced}


def _trust(opts: TlsOptions) -> str:
    if opts.tls_insecure:
        return "tls_insecure: no verification"
    return f"trusting ca_file={opts.ca_file}" if opts.ca_file else "trusting the system CAs"


def diagnose(opts: TlsOptions, timeout: float = 3.0) -> str | None:
    """Why a TLS handshake with the first address fails, in words; None if it succeeds or
    the address cannot be reached at all (then the client's own error says enough)."""
    host, port = opts.addresses[0]
    context = ssl.create_default_context(cafile=opts.ca_file)
    if opts.tls_insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        if opts.cert_file and opts.key_file:
            context.load_cert_chain(opts.cert_file, opts.key_file)
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            # With TLS 1.3 a refused client certificate shows on the first read.
            tls.settimeout(0.5)
            with contextlib.suppress(TimeoutError):
                tls.recv(1)
    except ssl.SSLCertVerificationError as exc:
        return (
            f"TLS: the server's certificate is not trusted ({exc.verify_message}; {_trust(opts)})"
        )
    except ssl.SSLError as exc:
        reason = exc.reason or str(exc)
        if "CERTIFICATE_REQUIRED" in reason and not opts.cert_file:
            reason += ": the server wants a client certificate (cert_file, key_file)"
        return f"TLS handshake failed: {reason} ({_trust(opts)})"
    except OSError:
        return None
    return None
