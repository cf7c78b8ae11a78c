"""jq for definitions: compiled once, evaluated natively, always bounded.

``compile(source)`` returns a :class:`Program`.  Programs in the native subset
run as Python closures (``evaluating.py``); the rest run in libjq inside a
bounded worker process (``sandboxing.py``).  Every program is also compiled
by libjq once, so what we accept is exactly what jq accepts, and checked
against the constructs definitions may not use (assignment, ``del``,
``..``, unbounded generators, environment and input access).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import jq as libjq

from .builtins import BUILTINS, ONE_BUILTINS, ONE_VIA_GEN
from .errors import JqError, JqLimitError, JqRuntimeError, JqSyntaxError, JqTooComplex, Unsupported
from .evaluating import BUDGET, Budget, Compiler, run_bounded
from .matching import check_literal_patterns
from .parsing import MAX_SOURCE_LENGTH, tokenize
from .sandboxing import SANDBOX, SandboxError, SandboxLimit

__all__ = [
    "JqError", "JqLimitError", "JqRuntimeError", "JqSyntaxError", "Limits", "Program",
    "compile", "LIMITS",
]

# Functions that loop without bound, explode, touch the environment or the
# process, or modify: definitions read state and must terminate quickly.
FORBIDDEN_FUNCTIONS = {
    "range": "may produce excessive output", "paths": "may produce excessive output",
    "leaf_paths": "may produce excessive output", "recurse": "may produce excessive output",
    "recurse_down": "may produce excessive output", "walk": "may produce excessive output",
    "repeat": "may produce excessive output", "while": "may loop without bound",
    "until": "may loop without bound", "combinations": "may produce excessive output",
    "del": "modifies its input", "delpaths": "modifies its input", "setpath": "modifies its input",
    "env": "reads the process environment", "input": "reads other inputs", "inputs": "reads other inputs",
    "debug": "writes to the log", "stderr": "writes to the log", "input_filename": "reads process state",
    "halt": "stops the process", "halt_error": "stops the process", "get_search_list": "reads process state",
    "input_line_number": "reads process state", "modulemeta": "reads modules",
    "get_prog_origin": "reads process state", "get_jq_origin": "reads process state",
}
FORBIDDEN_OPERATORS = {"=", "|=", "+=", "-=", "*=", "/=", "%=", "//=", "?//="}


@dataclass(frozen=True)
class Limits:
    """Bounds of one evaluation of one program on one value."""

    seconds: float = 0.25
    max_outputs: int = 10_000
    max_steps: int = 2_000_000


LIMITS = Limits()


def new_compiler() -> Compiler:
    return Compiler(BUILTINS, ONE_BUILTINS, ONE_VIA_GEN)


class Program:
    """A compiled jq program."""

    __slots__ = ("source", "native", "_fn", "_one", "limits")

    def __init__(self, source: str, fn, native: bool, limits: Limits, one=None):
        self.source = source
        self._fn = fn
        self._one = one
        self.native = native
        self.limits = limits

    def outputs(self, value, variables: dict | None = None) -> list:
        """Every output on `value`; raises JqRuntimeError or JqLimitError."""
        lim = self.limits
        if self._one is not None:
            scope = {BUDGET: Budget(lim.max_steps, lim.seconds)}
            if variables:
                scope.update(variables)
            try:
                v = self._one(value, scope)
            except RecursionError:
                raise JqLimitError("value nested too deeply") from None
            return [int(v) if v.__class__ is float and v.is_integer() and abs(v) < 2**53 else v]
        if self.native:
            return run_bounded(self._fn, value, max_outputs=lim.max_outputs,
                               max_steps=lim.max_steps, seconds=lim.seconds, env=variables)
        try:
            return SANDBOX.run(self.source, value, seconds=lim.seconds * 4, max_outputs=lim.max_outputs)
        except SandboxLimit as exc:
            raise JqLimitError(str(exc)) from None
        except SandboxError as exc:
            raise JqRuntimeError(str(exc)) from None

    def first(self, value, default=None):
        out = self.outputs(value)
        return out[0] if out else default

    def __repr__(self):
        return f"Program({self.source!r}, native={self.native})"


def check_safety(source: str) -> None:
    """Reject the constructs definitions may not use (raises JqSyntaxError)."""
    tokens, _ = tokenize(source)
    _check_tokens(tokens)
    check_literal_patterns(tokens)


def _check_tokens(tokens):
    for i, tok in enumerate(tokens):
        kind, value = tok.kind, tok.value
        if kind == "str":
            for part in value:
                if not isinstance(part, str):
                    _check_tokens(part)
        elif kind == "op" and value in FORBIDDEN_OPERATORS:
            raise JqSyntaxError(f"modifying operator '{value}' is not allowed")
        elif kind == "op" and value == "..":
            raise JqSyntaxError("recursive descent operator '..' is not allowed")
        elif kind == "var" and value in ("$ENV", "$__prog_args"):
            raise JqSyntaxError(f"{value} is not allowed: it reads process state")
        elif kind == "ident" and value in ("import", "include"):
            raise JqSyntaxError(f"'{value}' is not allowed: definitions cannot load modules")
        elif kind == "ident" and value in FORBIDDEN_FUNCTIONS:
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            is_key = nxt is not None and nxt.kind == "op" and nxt.value == ":"
            if not is_key:
                raise JqSyntaxError(f"function '{value}' {FORBIDDEN_FUNCTIONS[value]} and is not allowed")


def _libjq_check(source: str) -> None:
    try:
        libjq.compile(source)
    except ValueError as exc:
        message = str(exc).splitlines()[0] if str(exc) else "invalid jq"
        raise JqSyntaxError(message) from None


@lru_cache(maxsize=4096)
def compile(source: str, limits: Limits = LIMITS) -> Program:  # noqa: A001 - jq's own verb
    """Compile a jq program once; raises JqSyntaxError for invalid or unsafe programs."""
    if not isinstance(source, str):
        raise JqSyntaxError(f"expected a jq expression string, got {type(source).__name__}")
    from .parsing import parse

    if len(source) > MAX_SOURCE_LENGTH:
        raise JqTooComplex(f"expression longer than {MAX_SOURCE_LENGTH} characters")
    try:
        check_safety(source)
    except RecursionError:
        raise JqSyntaxError("expression nested too deeply") from None
    _libjq_check(source)
    try:
        compiler = new_compiler()
        node = parse(source)
        fn = compiler.compile(node)
        return Program(source, fn, True, limits, compiler.one(node))
    except Unsupported:
        return Program(source, None, False, limits)
    except JqTooComplex:
        raise
    except JqSyntaxError:
        # libjq accepted it, our parser did not: a corner of the grammar we do
        # not cover natively, so evaluate it in the sandbox.
        return Program(source, None, False, limits)
    except RecursionError:
        raise JqSyntaxError("expression nested too deeply") from None
