"""Views that enqueue a job: a sync one and an async one."""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from glidemq.integrations import django as glidemq_django


def _order_id(request: HttpRequest) -> str:
    return str(json.loads(request.body)["order_id"])


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    """Enqueue the order's confirmation. The order id is the job id: a client that retries
    the POST does not confirm twice."""
    order_id = _order_id(request)
    job = glidemq_django.add("orders", "confirm", {"order_id": order_id}, {"job_id": order_id})
    return JsonResponse({"id": order_id, "added": job is not None}, status=202)


@csrf_exempt
@require_POST
async def create_order_async(request: HttpRequest) -> JsonResponse:
    """The same from an async view (under an ASGI server)."""
    order_id = _order_id(request)
    job = await glidemq_django.aadd(
        "orders", "confirm", {"order_id": order_id}, {"job_id": order_id}
    )
    return JsonResponse({"id": order_id, "added": job is not None}, status=202)
