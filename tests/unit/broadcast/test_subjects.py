"""Broadcast subjects: validation of subjects and patterns, and the matcher, by example and
by property (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from glidemq import ValidationError
from glidemq.broadcast.subjects import (
    MAX_SUBJECT_BYTES,
    SubjectFilter,
    check_pattern,
    check_subject,
    subject_matches,
)

tokens = st.text(alphabet="abcxyz019-_", min_size=1, max_size=4)
subjects = st.lists(tokens, min_size=1, max_size=6).map(".".join)


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("orders.created", "orders.created", True),
        ("orders.created", "orders.updated", False),
        ("orders.*.created", "orders.eu.created", True),
        ("orders.*.created", "orders.eu.west.created", False),
        ("orders.*.created", "orders.created", False),
        ("orders.>", "orders.eu", True),
        ("orders.>", "orders.eu.west.created", True),
        ("orders.>", "orders", False),
        (">", "anything.at.all", True),
        ("*", "one", True),
        ("*", "one.two", False),
        ("*.>", "a.b", True),
        ("*.>", "a", False),
    ],
)
def test_matcher_examples(pattern: str, subject: str, expected: bool) -> None:
    assert subject_matches(pattern, subject) is expected


@pytest.mark.parametrize(
    "bad",
    ["", ".", "a.", ".a", "a..b", "a.>.b", ">.a", "a.b*", "a.>x", "a b", "a.\tb", 7, None],
)
def test_bad_patterns_are_refused(bad: object) -> None:
    with pytest.raises(ValidationError) as err:
        check_pattern(bad)
    assert err.value.field == "subjects"


@pytest.mark.parametrize("bad", ["", "a..b", "a.*", "a.>", "a*", "x>", "a b", 3])
def test_bad_subjects_are_refused(bad: object) -> None:
    with pytest.raises(ValidationError) as err:
        check_subject(bad)
    assert err.value.field == "subject"


def test_too_long_is_refused() -> None:
    with pytest.raises(ValidationError):
        check_subject("a" * (MAX_SUBJECT_BYTES + 1))
    assert check_subject("a" * MAX_SUBJECT_BYTES)


def test_filter_needs_a_pattern_and_never_passes_a_message_without_subject() -> None:
    with pytest.raises(ValidationError):
        SubjectFilter.of([])
    f = SubjectFilter.of(["orders.*.created", "orders.*.created", "audit.>"])
    assert f.patterns == ("orders.*.created", "audit.>")  # duplicates dropped, order kept
    assert f.matches("audit.x.y") and f.matches("orders.eu.created")
    assert not f.matches("orders.eu.deleted") and not f.matches(None)


@given(subjects)
def test_a_subject_matches_itself_and_the_full_wildcards(subject: str) -> None:
    n = len(subject.split("."))
    assert subject_matches(subject, subject)
    assert subject_matches(">", subject)
    assert subject_matches(".".join(["*"] * n), subject)
    assert not subject_matches(".".join(["*"] * (n + 1)), subject)


@given(subjects, st.data())
def test_star_replaces_exactly_one_token(subject: str, data: st.DataObject) -> None:
    parts = subject.split(".")
    i = data.draw(st.integers(0, len(parts) - 1))
    pattern = ".".join([*parts[:i], "*", *parts[i + 1 :]])
    assert subject_matches(pattern, subject)
    other = data.draw(tokens)
    changed = ".".join([*parts[:i], other, *parts[i + 1 :]])
    assert subject_matches(pattern, changed)  # any value of that token
    assert not subject_matches(pattern, subject + ".extra")


@given(subjects, st.data())
def test_tail_wildcard_matches_one_or_more_trailing_tokens(
    subject: str, data: st.DataObject
) -> None:
    parts = subject.split(".")
    i = data.draw(st.integers(0, len(parts)))
    pattern = ".".join([*parts[:i], ">"])
    assert subject_matches(pattern, subject) is (len(parts) > i)


@given(st.lists(st.sampled_from(["a", "b", "*"]), min_size=1, max_size=4), subjects)
def test_matching_agrees_with_a_token_by_token_reading(pattern: list[str], subject: str) -> None:
    parts = subject.split(".")
    expected = len(pattern) == len(parts) and all(
        p == "*" or p == s for p, s in zip(pattern, parts, strict=True)
    )
    assert subject_matches(".".join(pattern), subject) is expected


def _reference(pattern: list[str], subject: list[str]) -> bool:
    """A second, recursive reading of the rules, to check the matcher against."""
    if not pattern:
        return not subject
    head, rest = pattern[0], pattern[1:]
    if head == ">":
        return len(subject) >= 1
    if not subject:
        return False
    return (head == "*" or head == subject[0]) and _reference(rest, subject[1:])


patterns = st.tuples(
    st.lists(st.sampled_from(["a", "b", "ab", "*"]), min_size=0, max_size=4),
    st.booleans(),
).filter(lambda t: t[0] or t[1])


@given(patterns, st.lists(st.sampled_from(["a", "b", "ab"]), min_size=1, max_size=6))
def test_matcher_agrees_with_a_recursive_reference(
    pattern: tuple[list[str], bool], subject: list[str]
) -> None:
    tokens = pattern[0] + ([">"] if pattern[1] else [])
    assert subject_matches(".".join(tokens), ".".join(subject)) is _reference(tokens, subject)
    f = SubjectFilter.of([".".join(tokens), "never.matches.this.one.x.y.z"])
    assert f.matches(".".join(subject)) is _reference(tokens, subject)
