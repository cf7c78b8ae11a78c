"""The paths a jq expression addresses, so a definition's read paths can be written.

Updating a pod spec (scheduler name, labels, suspend flags) writes at the very
paths a definition reads from, like jq's ``path(f)``.  Only path expressions
have paths: navigation (``.a``, ``.[0]``, ``.["k"]``), iteration (``.[]``),
pipes, commas, ``?``, ``select``, ``if``, ``//``, ``first``/``last`` and
variable bindings.  Anything else is "not assignable" and says so.
"""

from __future__ import annotations

from .builtins import BUILTINS, ONE_BUILTINS, ONE_VIA_GEN
from .errors import JqError, JqLimitError, JqRuntimeError
from .evaluating import BUDGET, Budget, Compiler, index, iterate, truthy
from .parsing import parse




class NotAssignable(JqError):
    """The expression computes values rather than addressing places."""


def assignable_paths(source: str, value, *, seconds: float = 0.25, max_steps: int = 2_000_000) -> list:
    """[(path, value at path)] of a path expression evaluated on `value`."""
    node = parse(source)
    env = {BUDGET: Budget(max_steps, seconds)}
    try:
        return list(_paths(node, value, (), env))
    except RecursionError:
        raise JqLimitError("value nested too deeply") from None


def _values(node, value, env):
    return Compiler(BUILTINS, ONE_BUILTINS, ONE_VIA_GEN).compile(node)(value, env)


def _paths(node, value, path, env):
    tag = node[0]
    if tag == "identity":
        yield path, value
    elif tag == "index":
        for base_path, base in _paths(node[1], value, path, env):
            for key in _values(node[2], value, env):
                yield (*base_path, key), index(base, key)
    elif tag == "iter":
        for base_path, base in _paths(node[1], value, path, env):
            if base is None:
                continue
            items = iterate(base)
            env[BUDGET].tick(len(items) + 1)
            keys = range(len(base)) if isinstance(base, list) else list(base)
            for k, item in zip(keys, items):
                yield (*base_path, k), item
    elif tag == "pipe":
        for mid_path, mid in _paths(node[1], value, path, env):
            yield from _paths(node[2], mid, mid_path, env)
    elif tag == "comma":
        yield from _paths(node[1], value, path, env)
        yield from _paths(node[2], value, path, env)
    elif tag == "opt":
        inner = node[1]
        keys = list(_values(inner[2], value, env)) if inner[0] == "index" else None
        for base_path, base in _paths(inner[1], value, path, env):
            try:
                if keys is None:
                    found = list(_paths((inner[0], ("identity",), *inner[2:]), base, base_path, env))
                else:
                    found = [((*base_path, k), index(base, k)) for k in keys]
            except JqRuntimeError:
                continue
            yield from found
    elif tag == "try":
        if node[2] is not None:
            raise NotAssignable("try/catch has no path")
        try:
            yield from list(_paths(node[1], value, path, env))
        except JqRuntimeError:
            return
    elif tag == "if":
        for cond in _values(node[1], value, env):
            if truthy(cond):
                yield from _paths(node[2], value, path, env)
            elif node[3] is not None:
                yield from _paths(node[3], value, path, env)
            else:
                yield path, value
    elif tag == "alt":
        found = [(p, v) for p, v in _paths(node[1], value, path, env) if truthy(v)]
        yield from found or _paths(node[2], value, path, env)
    elif tag == "as":
        for bound in _values(node[1], value, env):
            inner = dict(env)
            inner[node[2]] = bound
            yield from _paths(node[3], value, path, inner)
    elif tag == "call" and node[1] == "select" and len(node[2]) == 1:
        for ok in _values(node[2][0], value, env):
            if truthy(ok):
                yield path, value
    elif tag == "call" and node[1] in ("first", "last") and len(node[2]) == 1:
        found = list(_paths(node[2][0], value, path, env))
        if found:
            yield found[0] if node[1] == "first" else found[-1]
    elif tag == "call" and node[1] == "empty" and not node[2]:
        return
    else:
        raise NotAssignable(f"'{tag if tag != 'call' else node[1]}' computes a value, it does not address a path")
