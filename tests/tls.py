"""A real TLS endpoint for the tests: Debian's stunnel4 in front of a TLS-less Valkey, with a
throw-away CA, server and client certificates made by the `openssl` command.

`ensure_stunnel()` finds stunnel, installing the Debian package when it can (root and
apt-get); a test that cannot have it skips with the reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["Certs", "ensure_stunnel", "make_certs", "stunnel"]

_install_error: str | None = None


def _apt_install() -> str | None:
    """Install stunnel4 with apt-get; an error text, or None once it is installed."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "stunnel is not installed and apt-get cannot run here (not root or no apt)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def apt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["apt-get", *args], env=env, capture_output=True, text=True, timeout=600
        )

    done = apt("install", "-y", "-q", "stunnel4")
    if done.returncode != 0:  # the package lists may be missing or stale
        apt("update", "-q")
        done = apt("install", "-y", "-q", "stunnel4")
    if done.returncode != 0:
        return f"apt-get install stunnel4 failed: {done.stderr.strip()[-300:]}"
    return None


def ensure_stunnel() -> str:
    """The stunnel binary; installs Debian's stunnel4 if missing, else skips the test."""
    global _install_error
    found = shutil.which("stunnel4") or shutil.which("stunnel")
    if found is None and _install_error is None:
        _install_error = _apt_install()
        found = shutil.which("stunnel4") or shutil.which("stunnel")
    if found is None:
        pytest.skip(f"no TLS endpoint: {_install_error or 'stunnel not found after install'}")
    if shutil.which("openssl") is None:
        pytest.skip("no TLS endpoint: the openssl command is needed to make test certificates")
    return found


@dataclass(frozen=True)
class Certs:
    """Files of a throw-away PKI: `ca` signed `server` (for localhost and 127.0.0.1) and
    `client`; `other_ca` signed nothing of it."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run(["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    key, cert = d / f"{name}.key", d / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout", key,
             "-out", cert, "-subj", f"/CN={name}", cwd=d)  # fmt: skip
    return key, cert


def _signed(d: Path, name: str, ca_key: Path, ca: Path, ext: str) -> tuple[Path, Path]:
    key, csr, cert = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem"
    (d / f"{name}.ext").write_text(ext)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
             "-subj", f"/CN={name}", cwd=d)  # fmt: skip
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
             "-days", "2", "-out", cert, "-extfile", d / f"{name}.ext", cwd=d)  # fmt: skip
    return key, cert


def make_certs(d: Path) -> Certs:
    """A CA, a server certificate for localhost/127.0.0.1, a client certificate, and a
    second CA that signed neither."""
    d.mkdir(parents=True, exist_ok=True)
    ca_key, ca = _ca(d, "test-ca")
    _, other_ca = _ca(d, "other-ca")
    server_key, server_cert = _signed(
        d,
        "server",
        ca_key,
        ca,
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    client_key, client_cert = _signed(d, "client", ca_key, ca, "extendedKeyUsage=clientAuth\n")
    return Certs(ca, server_cert, server_key, client_cert, client_key, other_ca)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def stunnel(
    binary: str, certs: Certs, backend: tuple[str, int], workdir: Path, *, client_ca: bool
) -> Iterator[int]:
    """Run stunnel accepting TLS on a free loopback port (yielded) and forwarding to
    `backend`; with `client_ca`, clients must show a certificate signed by the test CA."""
    port = _free_port()
    conf = workdir / f"stunnel-{port}.conf"
    lines = [
        "foreground = yes",
        f"pid = {workdir / f'stunnel-{port}.pid'}",
        "debug = 4",
        "[valkey]",
        f"accept = 127.0.0.1:{port}",
        f"connect = {backend[0]}:{backend[1]}",
        f"cert = {certs.server_cert}",
        f"key = {certs.server_key}",
    ]
    if client_ca:
        lines += [f"CAfile = {certs.ca}", "verifyChain = yes", "requireCert = yes"]
    conf.write_text("\n".join(lines) + "\n")
    log = open(workdir / f"stunnel-{port}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([binary, str(conf)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                text = (workdir / f"stunnel-{port}.log").read_text(errors="replace")
                pytest.fail(f"stunnel did not start (exit {proc.poll()}):\n{text[-2000:]}")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
