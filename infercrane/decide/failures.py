"""How an implementation of the kernel lab can fail, and the one word each failure is said with (console, receipt,
decision): data the decision reads and the result records."""
from __future__ import annotations

from typing import Literal

Failure = Literal["incorrect", "crashed", "timeout", "timer_fault", "error", "harness"]
# How a failure kind is worded in one line (console, receipt, decision): each its own word.
FAILURE_WORDS: dict[str, str] = {"incorrect": "incorrect", "crashed": "crashed", "timeout": "timed out",
                                 "timer_fault": "timer fault", "error": "raised an error", "harness": "harness fault"}
