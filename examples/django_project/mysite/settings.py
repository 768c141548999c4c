"""Settings of the example project: the least Django needs, plus GLIDEMQ."""

from __future__ import annotations

import os

SECRET_KEY = "example-only-not-secret"
DEBUG = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "mysite.urls"
INSTALLED_APPS = ["glidemq.integrations.django", "shop"]
DATABASES: dict[str, dict[str, str]] = {}  # the example keeps no data of its own
USE_TZ = True
TIME_ZONE = "UTC"  # Django exports it as TZ, which glidemq_run passes on to the workers

SHOP_NAME = "Example Shop"

GLIDEMQ = {
    # Read from the environment, as a password should be; None falls back to GLIDEMQ_URL.
    "url": os.environ.get("VALKEY_URL"),
    "processor": "shop.tasks:process",
    "queues": ["orders"],
    "run": {"procs": 1, "concurrency": 5, "grace": 10},
}
