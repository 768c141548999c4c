"""The processor `manage.py glidemq_run` runs (GLIDEMQ["processor"] in the settings).

glidemq-run imports this module in its own processes, outside manage.py: Django is set up
here, from the DJANGO_SETTINGS_MODULE the command passes on.
"""

from __future__ import annotations

from typing import Any

import django

django.setup()

from django.conf import settings  # noqa: E402  (after setup)

import glidemq  # noqa: E402


async def process(job: glidemq.Job[dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    """Confirm an order (here: say which shop did)."""
    return {"order_id": job.data["order_id"], "confirmed_by": settings.SHOP_NAME}
