"""glidemq-run's handling of the server URL: where it comes from (--url, GLIDEMQ_URL,
--url-file, the internal --url-fd), how --url is found and removed from a command line,
and the TLS flags and variables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from glidemq.runtime.cli import _connection
from glidemq.runtime.config import UsageError, parse_config
from glidemq.runtime.secrets import _without_url_flag, read_url, url_flag


def test_url_flag_in_both_spellings() -> None:
    assert url_flag(["app:f", "--url", "valkey://:pw@h", "--procs", "2"]) == "valkey://:pw@h"
    assert url_flag(["app:f", "--url=valkey://:pw@h"]) == "valkey://:pw@h"
    assert url_flag(["app:f", "--url-file", "/x"]) is None
    assert _without_url_flag(["a:f", "--url", "u", "--procs", "2", "--url=v"]) == [
        "a:f",
        "--procs",
        "2",
    ]


def test_url_from_a_file_and_from_a_pipe(tmp_path: Path) -> None:
    path = tmp_path / "url"
    path.write_text("  valkey://:pw@cache:6380\n")
    cfg = parse_config(["a:f", "--url-file", str(path)], env={})
    assert read_url(cfg) == "valkey://:pw@cache:6380"
    r, w = os.pipe()
    os.write(w, b"valkey://:pw@cache:6381")
    os.close(w)
    cfg = parse_config(["a:f", "--url-fd", str(r)], env={})
    assert read_url(cfg) == "valkey://:pw@cache:6381"
    with pytest.raises(OSError):
        os.fstat(r)  # read once and closed: no worker inherits it


def test_url_file_problems_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--url-file: cannot read"):
        read_url(parse_config(["a:f", "--url-file", str(tmp_path / "none")], env={}))
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(UsageError, match="is empty"):
        read_url(parse_config(["a:f", "--url-file", str(tmp_path / "empty")], env={}))


def test_url_file_from_the_environment_and_a_flag_wins(tmp_path: Path) -> None:
    cfg = parse_config(["a:f"], env={"GLIDEMQ_URL_FILE": "/run/secrets/url"})
    assert cfg.url_file == "/run/secrets/url"
    cfg = parse_config(["a:f", "--url", "valkey://h"], env={"GLIDEMQ_URL_FILE": "/x"})
    assert (cfg.url, cfg.url_file) == ("valkey://h", None)
    with pytest.raises(UsageError, match="choose one"):
        parse_config(["a:f"], env={"GLIDEMQ_URL_FILE": "/x", "GLIDEMQ_URL": "valkey://h"})


def test_tls_flags_and_variables_make_tls_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    cfg = parse_config(["a:f", "--url", "valkey://h:6380", "--tls-ca-file", str(ca)], env={})
    conn = _connection(cfg)
    assert conn.tls and conn.ca_file == str(ca)
    cfg = parse_config(["a:f", "--url", "valkey://h"], env={"GLIDEMQ_TLS_INSECURE": "1"})
    assert _connection(cfg).tls_insecure
    cfg = parse_config(["a:f", "--cluster", "h:7000", "--tls-insecure"], env={})
    assert _connection(cfg).cluster and _connection(cfg).tls


def test_unreadable_tls_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from glidemq import ValidationError

    cfg = parse_config(
        ["a:f", "--url", "valkey://h", "--tls-ca-file", str(tmp_path / "none.pem")], env={}
    )
    with pytest.raises(ValidationError, match="ca_file: cannot read"):
        _connection(cfg)


def test_tls_flags_with_embedded_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from glidemq.runtime.cli import main
    from glidemq.runtime.config import ExitCode

    assert main(["a:f", "--queue", "q", "--embedded", "--tls-insecure"]) == ExitCode.USAGE
    assert "--embedded runs a server without TLS" in capsys.readouterr().err
