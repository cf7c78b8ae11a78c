"""Errors of jq compilation and evaluation.

Runtime errors (`JqRuntimeError`) are jq's own: `try`, `?` and `//` catch
them.  Limit errors are ours and deliberately not catchable from jq, so a
hostile program cannot swallow its own time or output bound.
"""


class JqError(Exception):
    """Base of every jq problem."""


class JqSyntaxError(JqError):
    """The program is not valid jq, or uses a construct definitions may not use."""


class JqTooComplex(JqSyntaxError):
    """The program is longer or more deeply nested than definitions may be."""


class Unsupported(JqError):
    """Valid jq outside the native subset: evaluated by libjq in the sandbox."""


class JqRuntimeError(JqError):
    """An error raised while evaluating (jq's `error`), carrying jq's error value."""

    def __init__(self, value):
        self.value = value
        super().__init__(value if isinstance(value, str) else repr(value))


class JqLimitError(JqError):
    """An evaluation exceeded its time, output or size bound."""
