"""The Django app config: `glidemq.integrations.django` in INSTALLED_APPS brings the
`glidemq_run` management command."""

from __future__ import annotations

from django.apps import AppConfig


class GlideMQConfig(AppConfig):
    """glidemq's Django app (label `glidemq`)."""

    name = "glidemq.integrations.django"
    label = "glidemq"
    verbose_name = "glidemq"
