"""Reading a posted HTML form without extra dependencies: `application/x-www-form-urlencoded`
bodies only, of bounded size."""

from __future__ import annotations

from urllib.parse import parse_qs

from starlette.requests import Request

from ..errors import ValidationError

__all__ = ["MAX_FORM_BYTES", "MAX_FORM_FIELDS", "read_form"]

MAX_FORM_BYTES = 256 * 1024
MAX_FORM_FIELDS = 10_000


async def read_form(request: Request) -> dict[str, list[str]]:
    """The form's fields, each with every value given (a checkbox list has several)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("application/x-www-form-urlencoded", ""):
        raise ValidationError("content-type", "send an application/x-www-form-urlencoded form")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise ValidationError("form", f"larger than {MAX_FORM_BYTES} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError("form", "not UTF-8") from exc
    try:
        return parse_qs(text, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS)
    except ValueError:  # more fields than that: refused like any bad form, never a 500
        raise ValidationError("form", f"more than {MAX_FORM_FIELDS} fields") from None
