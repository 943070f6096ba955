"""One exception root, mapped to exit codes in one place (``infercrane.cli``).

Every error says what was wrong and what to do about it.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


INTERNAL_ERROR_EXIT = 70  # an exception InferCrane did not raise on purpose (a bug): sysexits' EX_SOFTWARE, never
# a gate's or a --fail-on's 1


class InfercraneError(Exception):
    """Root of every error InferCrane raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"

    def lines(self) -> list[str]:
        """What the CLI prints: one line per problem, the hint on the last one."""
        lines = self.message.splitlines() or [""]
        if self.hint:
            lines[-1] = f"{lines[-1]}; {self.hint}"
        return lines


class InputError(InfercraneError):
    """Bad user input: a file, a flag, a recipe, a model name. Raised before any GPU time is spent."""

    exit_code = 2


@contextmanager
def about(option: str) -> Iterator[None]:
    """Name ``option`` (e.g. ``--policy``) in any InputError raised inside, unless the message names it already."""
    try:
        yield
    except InputError as e:
        if option not in e.message:
            e.message = f"{option}: {e.message}"
            e.args = (e.message, *e.args[1:])
        raise


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


class DriverExited(RunFailed):
    """A driver process exited with a non-zero code or was killed by a signal (``how`` says which), and the engine it
    drove was not found dead: the driver's own failure."""

    def __init__(self, message: str, *, how: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.how = how


class WindowsLost(RunFailed):
    """A driver process that measures several windows (an AIPerf block) ended, normally or with a non-zero exit
    (``DriverExited``), the engine alive, having finished only the first ``finished`` of its windows: the driver's own
    failure, which a new process can retry."""

    def __init__(self, message: str, *, finished: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.finished = finished
