"""One exception root, mapped to exit codes in one place (``infercrane.cli``).

Every error says what was wrong and what to do about it.
"""
from __future__ import annotations


class InfercraneError(Exception):
    """Root of every error InferCrane raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class InputError(InfercraneError):
    """Bad user input: a file, a flag, a recipe, a model name. Raised before any GPU time is spent."""

    exit_code = 2


class ReceiptInvalid(InputError):
    """A receipt failed validation. ``problems`` lists (file, field path, reason) triples."""

    def __init__(self, problems: list[tuple[str, str, str]]) -> None:
        self.problems = problems
        lines = [f"{f}: {path}: {reason}" for f, path, reason in problems]
        super().__init__("\n".join(lines))


class UnavailableError(InfercraneError):
    """A tool or engine InferCrane needs is not installed or cannot run here."""

    exit_code = 3


class RunFailed(InfercraneError):
    """A measurement run failed part-way; whatever was measured is kept and reported."""

    exit_code = 4
