"""The admin command warns about a password in --url (every local user can read argv), as
the proxy does, and still says nothing of the password itself."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ValkeyAddress

from .conftest import REPO_ROOT, cli_env


def test_a_password_in_url_is_warned_about_and_not_printed(valkey_server: ValkeyAddress) -> None:
    url = valkey_server.url.replace("valkey://", "valkey://:s3cret-pw@")
    done = subprocess.run(
        [sys.executable, "-m", "glidemq.admin.cli", "--url", url, "queues"],
        cwd=REPO_ROOT, env=cli_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert "warning: the password in --url" in done.stderr
    assert "s3cret-pw" not in done.stderr + done.stdout


def test_no_warning_without_a_password(valkey_server: ValkeyAddress) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "glidemq.admin.cli", "--url", valkey_server.url, "queues"],
        cwd=REPO_ROOT, env=cli_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "warning" not in done.stderr
