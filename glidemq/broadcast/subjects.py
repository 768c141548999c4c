"""Message subjects of broadcasts and the patterns subscriptions filter them with.

A subject is a dot-separated list of tokens, `orders.eu.created`. A pattern is a subject
whose tokens may also be `*` (exactly one token, any value) or, as the last token only,
`>` (one or more remaining tokens): `orders.*.created`, `orders.>`. Tokens are non-empty
and hold no whitespace; `*` and `>` are wildcards only as whole tokens, and never appear
in a published subject. Bad subjects and patterns raise `ValidationError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ValidationError

__all__ = [
    "MAX_SUBJECT_BYTES",
    "SubjectFilter",
    "check_pattern",
    "check_subject",
    "subject_matches",
]

MAX_SUBJECT_BYTES = 256
_WILDCARDS = ("*", ">")


def _tokens(text: object, field: str, what: str) -> list[str]:
    if not isinstance(text, str) or not text:
        raise ValidationError(field, f"a {what} must be a non-empty string, got {text!r}")
    if len(text.encode()) > MAX_SUBJECT_BYTES:
        raise ValidationError(field, f"{text!r} is longer than {MAX_SUBJECT_BYTES} bytes")
    tokens = text.split(".")
    for i, token in enumerate(tokens):
        if not token:
            raise ValidationError(field, f"{text!r} has an empty token at position {i + 1}")
        if any(c.isspace() or not c.isprintable() for c in token):
            raise ValidationError(
                field, f"{text!r}: token {token!r} contains whitespace or control characters"
            )
    return tokens


def check_subject(subject: object, field: str = "subject") -> str:
    """Return `subject` if it is a valid published subject (no wildcards), else raise."""
    tokens = _tokens(subject, field, "subject")
    for token in tokens:
        if token in _WILDCARDS or "*" in token or ">" in token:
            raise ValidationError(
                field, f"{subject!r}: a published subject cannot contain '*' or '>'"
            )
    return subject  # type: ignore[return-value]


def check_pattern(pattern: object, field: str = "subjects") -> str:
    """Return `pattern` if it is a valid subscription pattern, else raise."""
    tokens = _tokens(pattern, field, "subject pattern")
    for i, token in enumerate(tokens):
        if token == ">" and i != len(tokens) - 1:
            raise ValidationError(field, f"{pattern!r}: '>' may only be the last token")
        if token not in _WILDCARDS and ("*" in token or ">" in token):
            raise ValidationError(
                field, f"{pattern!r}: '*' and '>' are wildcards only as whole tokens"
            )
    return pattern  # type: ignore[return-value]


def _match(pattern: list[str], subject: list[str]) -> bool:
    for i, token in enumerate(pattern):
        if token == ">":
            return len(subject) > i
        if i >= len(subject) or (token != "*" and token != subject[i]):
            return False
    return len(subject) == len(pattern)


def subject_matches(pattern: str, subject: str) -> bool:
    """Whether `subject` matches `pattern` (both are checked first)."""
    check_pattern(pattern, "pattern")
    check_subject(subject)
    return _match(pattern.split("."), subject.split("."))


@dataclass(frozen=True, slots=True)
class SubjectFilter:
    """Patterns of one subscription: a subject passes when any pattern matches it."""

    patterns: tuple[str, ...]

    @classmethod
    def of(cls, patterns: str | Iterable[str], field: str = "subjects") -> SubjectFilter:
        """A filter from one pattern or several (at least one), each checked."""
        items = [patterns] if isinstance(patterns, str) else list(patterns)
        if not items:
            raise ValidationError(field, "needs at least one pattern (None: no filter)")
        checked = tuple(dict.fromkeys(check_pattern(p, field) for p in items))
        return cls(checked)

    def matches(self, subject: str | None) -> bool:
        """Whether a message with this subject passes; a message without one never does."""
        if subject is None:
            return False
        tokens = subject.split(".")
        return any(_match(p.split("."), tokens) for p in self.patterns)
