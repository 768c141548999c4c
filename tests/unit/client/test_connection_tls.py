"""ConnectionOptions: TLS settings (fields, URL query, checks) and secrets kept out of
messages."""

from __future__ import annotations

import pytest

from glidemq import ConnectionOptions, ValidationError
from glidemq.errors import UnsupportedOptionError


def test_tls_settings_from_the_url_query_round_trip() -> None:
    url = (
        "valkeys://u:pw@cache.internal:6380?ca_file=/etc/ca.pem&cert_file=/c.pem"
        "&key_file=/k.pem&server_name=cache.internal"
    )
    o = ConnectionOptions.from_url(url)
    assert o.tls
    assert (o.ca_file, o.cert_file, o.key_file) == ("/etc/ca.pem", "/c.pem", "/k.pem")
    assert o.server_name == "cache.internal"
    assert not o.tls_insecure
    assert "pw" not in o.url
    again = ConnectionOptions.from_url(o.url, password="pw")
    assert again == o


def test_insecure_switch_is_explicit() -> None:
    o = ConnectionOptions.from_url("valkeys://h:6380?tls_insecure=1")
    assert o.tls_insecure
    assert ConnectionOptions.from_url(o.url).tls_insecure
    assert not ConnectionOptions.from_url("valkeys://h:6380?tls_insecure=0").tls_insecure
    with pytest.raises(ValidationError, match="tls_insecure"):
        ConnectionOptions.from_url("valkeys://h:6380?tls_insecure=maybe")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"ca_file": "/ca.pem"}, "ca_file"),
        ({"cert_file": "/c.pem", "key_file": "/k.pem"}, "cert_file"),
        ({"tls_insecure": True}, "tls_insecure"),
        ({"server_name": "h"}, "server_name"),
    ],
)
def test_tls_settings_need_tls(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        ConnectionOptions(addresses=(("h", 6379),), **kwargs)  # type: ignore[arg-type]


def test_client_certificate_and_key_go_together() -> None:
    with pytest.raises(ValidationError, match="key_file"):
        ConnectionOptions(tls=True, cert_file="/c.pem")
    with pytest.raises(ValidationError, match="cert_file"):
        ConnectionOptions(tls=True, key_file="/k.pem")


def test_insecure_and_a_ca_file_contradict() -> None:
    with pytest.raises(ValidationError, match="tls_insecure"):
        ConnectionOptions(tls=True, tls_insecure=True, ca_file="/ca.pem")


def test_server_name_other_than_the_host_is_refused() -> None:
    # valkey-glide 2.6 checks the certificate against the host it connects to, nothing else
    with pytest.raises(UnsupportedOptionError, match="server_name"):
        ConnectionOptions(addresses=(("10.0.0.5", 6380),), tls=True, server_name="cache")
    same = ConnectionOptions(addresses=(("cache", 6380),), tls=True, server_name="cache")
    assert same.server_name == "cache"


def test_url_errors_do_not_repeat_the_password() -> None:
    for bad in (
        "valkey://u:hunter2@h:port",
        "valkey://u:hunter2@h:6379/db",
        "valkey://u:hunter2@h:6379?timeout_ms=x",
        "http://u:hunter2@h:6379",
    ):
        with pytest.raises(ValidationError) as info:
            ConnectionOptions.from_url(bad)
        assert "hunter2" not in str(info.value), str(info.value)
