"""Celery's words on a task are refused with glidemq's way in the message, never taken
silently: options (max_retries, countdown, eta, bind, ...), methods (.s, .apply_async,
.retry) and a Celery option passed to `.delay`. An argument without a type hint must be
JSON, and the error names the task and the argument."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

import glidemq
from glidemq import JobOptions, TaskArgumentError, ValidationError


@glidemq.task("celery-words")
def add(x: int, y: int) -> int:
    return x + y


@glidemq.task("celery-words")
def untyped(x, y=None):  # type: ignore[no-untyped-def]
    return x


@pytest.mark.parametrize(
    ("word", "value", "says"),
    [
        ("max_retries", 3, "max_retries=3 is attempts=4"),
        ("countdown", 10, "countdown=10 is delay=10_000"),
        ("eta", dt.datetime(2030, 1, 1, tzinfo=dt.UTC), "delay=int((eta - datetime.now"),
        ("bind", True, "glidemq.current_job() is the running job"),
        ("time_limit", 30, "timeout=30_000"),
        ("expires", 60, "ttl"),
    ],
)
def test_a_celery_option_is_refused_with_glidemqs_way(word: str, value: object, says: str) -> None:
    for attempt in (
        lambda: glidemq.task("celery-words", **{word: value}),
        lambda: add.with_options(**{word: value}),
        lambda: JobOptions.coerce({word: value}),
    ):
        with pytest.raises(ValidationError) as refused:
            attempt()
        assert refused.value.field == word
        assert "not a glidemq option" in str(refused.value) and says in str(refused.value)
        assert "did you mean" not in str(refused.value)  # bind=True once suggested job_id


def test_a_celery_option_given_to_delay_is_not_taken_for_an_argument() -> None:
    with pytest.raises(TaskArgumentError) as refused:
        add.payload(2, 3, countdown=10)  # what add.delay(2, 3, countdown=10) checks
    assert refused.value.field == "add.countdown"
    assert "with_options(delay=10_000)" in str(refused.value)


@pytest.mark.parametrize(
    ("method", "says"),
    [
        ("s", "task.flow_job(*args, **kwargs)"),
        ("apply_async", "task.with_options(delay=ms, priority=...).delay(*args, **kwargs)"),
        ("retry", "raise glidemq.Retry(delay=60_000)"),
    ],
)
def test_a_celery_method_names_glidemqs_way(method: str, says: str) -> None:
    with pytest.raises(AttributeError) as missing:
        getattr(add, method)
    assert says in str(missing.value)
    assert not hasattr(add, method)


def test_other_missing_attributes_stay_plain_attribute_errors() -> None:
    with pytest.raises(AttributeError, match=r"^'Task' object has no attribute 'nope'$"):
        add.nope  # type: ignore[attr-defined]  # noqa: B018


@pytest.mark.parametrize(
    ("value", "where", "says"),
    [
        (object(), "untyped.x", "pass JSON, or a value of a type a hint can name"),
        (dt.datetime(2026, 1, 2), "untyped.x", "(`x: datetime`)"),
        (uuid.uuid4(), "untyped.x", "(`x: UUID`)"),
        ([1, {2}], "untyped.x[1]", "give the parameter 'x' a type hint naming set"),
    ],
)
def test_an_untyped_argument_must_be_json_and_the_error_names_it(
    value: object, where: str, says: str
) -> None:
    with pytest.raises(TaskArgumentError) as refused:
        untyped.payload(value)
    assert refused.value.field == where
    assert type(value if where.endswith("x") else {2}).__name__ in str(refused.value)
    assert says in str(refused.value)


def test_json_arguments_without_hints_pass_as_they_are() -> None:
    data = {"x": {"a": [1, 2.5, None, True, "s"]}, "y": [["nested"]]}
    assert untyped.payload(**data) == data
