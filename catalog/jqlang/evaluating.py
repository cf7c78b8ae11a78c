"""Compiling a parsed jq AST into Python closures, and running them bounded.

Each node becomes ``fn(input, env) -> iterable of outputs`` (jq is a
generator language).  Nodes that can only ever produce one value from the
input alone (``.a.b["c"]``, literals) also get a plain ``value(input)``
function, so the paths that make up most definitions cost a few dict
look-ups instead of a chain of generators.

Every evaluation carries a :class:`Budget` in ``env``: iteration, collection
and reduction steps tick it, and it raises :class:`JqLimitError` when the
step count or the deadline is exceeded.  The native subset has no recursion
and no unbounded loop builtins, so ticks at those places bound any program.
"""

from __future__ import annotations

import math
import time

from .errors import JqLimitError, JqRuntimeError, JqSyntaxError
from .values import (
    MAX_SIZE,
    compare,
    jq_add,
    jq_div,
    jq_mod,
    jq_mul,
    jq_sub,
    normalize_number,
    tojson,
    tostring,
    type_name,
)

BUDGET = "\0budget"


class Budget:
    """Steps and wall-clock left to one top-level evaluation."""

    __slots__ = ("left", "deadline", "max_steps", "seconds")

    CHECK_EVERY = 512

    def __init__(self, max_steps: int, seconds: float):
        self.max_steps = max_steps
        self.seconds = seconds
        self.deadline = time.perf_counter() + seconds
        self.left = self.CHECK_EVERY

    def refill(self):
        self.max_steps -= self.CHECK_EVERY
        if self.max_steps <= 0:
            raise JqLimitError("evaluation exceeded its step bound")
        if time.perf_counter() > self.deadline:
            raise JqLimitError(f"evaluation exceeded its time bound of {self.seconds:g}s")
        self.left = self.CHECK_EVERY

    def tick(self, n: int = 1):
        self.left -= n
        if self.left <= 0:
            self.refill()


def truthy(v) -> bool:
    return v is not None and v is not False


def _index(container, key):
    """jq `.[key]` on one value."""
    if container is None and (isinstance(key, str) or (
            isinstance(key, (int, float)) and not isinstance(key, bool))):
        return None
    if isinstance(container, dict):
        if isinstance(key, str):
            return container.get(key)
        raise JqRuntimeError(f"Cannot index object with {type_name(key)}")
    if isinstance(container, list):
        if isinstance(key, bool) or not isinstance(key, (int, float)):
            if isinstance(key, list):
                return _indices(container, key)
            raise JqRuntimeError(f"Cannot index array with {type_name(key)}")
        if isinstance(key, float):
            if math.isnan(key):
                return None
            key = math.floor(key)
        if key < 0:
            key += len(container)
            if key < 0:
                return None
        return container[key] if key < len(container) else None
    if container is None:
        raise JqRuntimeError(f"Cannot index null with {type_name(key)}")
    if isinstance(key, str):
        raise JqRuntimeError(f'Cannot index {type_name(container)} with "{key}"')
    raise JqRuntimeError(f"Cannot index {type_name(container)} with {type_name(key)}")


def _indices(container, sub):
    if not sub:
        return None
    n = len(sub)
    return [i for i in range(len(container) - n + 1) if container[i:i + n] == sub]


def _iterate(value):
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return list(value.values())
    raise JqRuntimeError(f"Cannot iterate over {type_name(value)}" + (
        "" if value is None else f" ({tojson(value)[:40]})"))


def _slice(value, lo, hi):
    if value is None:
        return None
    if not isinstance(value, (list, str)):
        raise JqRuntimeError(f"Cannot index {type_name(value)} with object")
    for bound in (lo, hi):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, (int, float))):
            raise JqRuntimeError("Start and end indices of an array slice must be numbers")
    n = len(value)
    lo = 0 if lo is None else lo
    hi = n if hi is None else hi
    lo = math.floor(lo)
    hi = math.ceil(hi)
    if lo < 0:
        lo = max(0, n + lo)
    if hi < 0:
        hi = max(0, n + hi)
    return value[lo:hi]


class Compiler:
    """Turns AST tuples into closures; builtins are looked up in `builtins`."""

    def __init__(self, builtins):
        self.builtins = builtins

    # A node's "single" form: value(input) -> value, when the node always yields
    # exactly one value computed from the input alone (or raises).
    def single(self, node):
        tag = node[0]
        if tag == "identity":
            return lambda inp: inp
        if tag == "lit":
            value = node[1]
            if isinstance(value, (list, dict)):
                return None  # mutable literals go through the generic path (copied)
            return lambda inp: value
        if tag == "index":
            base = self.single(node[1])
            key_node = node[2]
            if base is None or key_node[0] != "lit":
                return None
            key = key_node[1]
            if isinstance(key, str):
                def get_field(inp, base=base, key=key):
                    obj = base(inp)
                    if obj.__class__ is dict:
                        return obj.get(key)
                    return _index(obj, key)
                return get_field
            return lambda inp: _index(base(inp), key)
        return None

    def compile(self, node):
        single = self.single(node)
        if single is not None:
            return lambda inp, env: (single(inp),)
        return getattr(self, "c_" + node[0])(node)

    # -- nodes ---------------------------------------------------------------
    def c_lit(self, node):
        import copy
        value = node[1]
        return lambda inp, env: (copy.deepcopy(value),)

    def c_var(self, node):
        name = node[1]

        def run(inp, env):
            try:
                return (env[name],)
            except KeyError:
                raise JqRuntimeError(f"${name} is not defined") from None
        return run

    def c_index(self, node):
        base = self.compile(node[1])
        key = self.compile(node[2])

        def run(inp, env):
            for k in key(inp, env):
                for obj in base(inp, env):
                    yield _index(obj, k)
        return run

    def c_slice(self, node):
        base = self.compile(node[1])
        lo = self.compile(node[2]) if node[2] is not None else (lambda inp, env: (None,))
        hi = self.compile(node[3]) if node[3] is not None else (lambda inp, env: (None,))

        def run(inp, env):
            for h in hi(inp, env):
                for low in lo(inp, env):
                    for obj in base(inp, env):
                        yield _slice(obj, low, h)
        return run

    def c_iter(self, node):
        base = self.compile(node[1])

        def run(inp, env):
            budget = env[BUDGET]
            for obj in base(inp, env):
                items = _iterate(obj)
                budget.tick(len(items) + 1)
                yield from items
        return run

    def c_pipe(self, node):
        left = self.compile(node[1])
        right = self.compile(node[2])

        def run(inp, env):
            for mid in left(inp, env):
                yield from right(mid, env)
        return run

    def c_comma(self, node):
        left = self.compile(node[1])
        right = self.compile(node[2])

        def run(inp, env):
            env[BUDGET].tick()
            yield from left(inp, env)
            yield from right(inp, env)
        return run

    def c_alt(self, node):
        left = self.compile(node[1])
        right = self.compile(node[2])

        # As libjq 1.8: errors on the left propagate (they are not "empty").
        def run(inp, env):
            found = [v for v in left(inp, env) if v is not None and v is not False]
            if found:
                return found
            return right(inp, env)
        return run

    def c_and(self, node):
        return self._logic(node, is_and=True)

    def c_or(self, node):
        return self._logic(node, is_and=False)

    def _logic(self, node, is_and):
        left = self.compile(node[1])
        right = self.compile(node[2])

        def run(inp, env):
            for lv in left(inp, env):
                if truthy(lv) != is_and:
                    yield not is_and
                    continue
                for rv in right(inp, env):
                    yield truthy(rv)
        return run

    def c_neg(self, node):
        inner = self.compile(node[1])

        def run(inp, env):
            for v in inner(inp, env):
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise JqRuntimeError(f"{type_name(v)} ({tojson(v)[:40]}) cannot be negated")
                yield -v
        return run

    _BINOPS = {
        "+": jq_add, "-": jq_sub, "*": jq_mul, "/": jq_div, "%": jq_mod,
        "==": lambda a, b: compare(a, b) == 0,
        "!=": lambda a, b: compare(a, b) != 0,
        "<": lambda a, b: compare(a, b) < 0,
        "<=": lambda a, b: compare(a, b) <= 0,
        ">": lambda a, b: compare(a, b) > 0,
        ">=": lambda a, b: compare(a, b) >= 0,
    }

    def c_binop(self, node):
        fn = self._BINOPS[node[1]]
        left = self.compile(node[2])
        right = self.compile(node[3])
        ls, rs = self.single(node[2]), self.single(node[3])
        if ls is not None and rs is not None:
            return lambda inp, env: (fn(ls(inp), rs(inp)),)

        def run(inp, env):
            for b in right(inp, env):
                for a in left(inp, env):
                    yield fn(a, b)
        return run

    def c_array(self, node):
        inner = self.compile(node[1])

        def run(inp, env):
            budget = env[BUDGET]
            out = []
            for v in inner(inp, env):
                budget.tick()
                out.append(v)
            return (out,)
        return run

    def c_object(self, node):
        entries = [(self.compile(k), self.compile(v)) for k, v in node[1]]

        def run(inp, env):
            results = [{}]
            budget = env[BUDGET]
            for key_fn, value_fn in entries:
                keys = list(key_fn(inp, env))
                for k in keys:
                    if not isinstance(k, str):
                        raise JqRuntimeError(f"Object keys must be strings (got {type_name(k)})")
                values = list(value_fn(inp, env))
                grown = []
                for partial in results:
                    for k in keys:
                        for v in values:
                            budget.tick()
                            obj = dict(partial)
                            obj[k] = v
                            grown.append(obj)
                results = grown
            return results
        return run

    def c_interp(self, node):
        parts = [p if isinstance(p, str) else self.compile(p) for p in node[1]]

        def run(inp, env):
            results = [""]
            for part in parts:
                if isinstance(part, str):
                    results = [r + part for r in results]
                else:
                    values = [tostring(v) for v in part(inp, env)]
                    results = [r + v for r in results for v in values]
                    env[BUDGET].tick(len(results))
                    if any(len(r) > MAX_SIZE for r in results):
                        raise JqLimitError("string exceeded the size bound")
            return results
        return run

    def c_if(self, node):
        cond = self.compile(node[1])
        then = self.compile(node[2])
        other = self.compile(node[3]) if node[3] is not None else None

        def run(inp, env):
            for c in cond(inp, env):
                if truthy(c):
                    yield from then(inp, env)
                elif other is not None:
                    yield from other(inp, env)
                else:
                    yield inp
        return run

    def c_opt(self, node):
        """`.a?`, `.[e]?`, `.[]?`: errors of this one index operation yield nothing."""
        inner = node[1]
        base = self.compile(inner[1])
        tag = inner[0]
        key = self.compile(inner[2]) if tag == "index" else None
        lo = self.compile(inner[2]) if tag == "slice" and inner[2] is not None else (lambda i, e: (None,))
        hi = self.compile(inner[3]) if tag == "slice" and inner[3] is not None else (lambda i, e: (None,))

        def run(inp, env):
            if tag == "iter":
                budget = env[BUDGET]
                for obj in base(inp, env):
                    try:
                        items = _iterate(obj)
                    except JqRuntimeError:
                        continue
                    budget.tick(len(items) + 1)
                    yield from items
            elif tag == "index":
                for k in key(inp, env):
                    for obj in base(inp, env):
                        try:
                            yield _index(obj, k)
                        except JqRuntimeError:
                            pass
            else:
                for h in hi(inp, env):
                    for low in lo(inp, env):
                        for obj in base(inp, env):
                            try:
                                yield _slice(obj, low, h)
                            except JqRuntimeError:
                                pass
        return run

    def c_try(self, node):
        body = self.compile(node[1])
        handler = self.compile(node[2]) if node[2] is not None else None

        def run(inp, env):
            try:
                for v in body(inp, env):
                    yield v
            except JqRuntimeError as exc:
                if handler is not None:
                    yield from handler(exc.value, env)
            except RecursionError:
                raise JqLimitError("value nested too deeply") from None
        return run

    def c_as(self, node):
        source = self.compile(node[1])
        name = node[2]
        body = self.compile(node[3])

        def run(inp, env):
            for v in source(inp, env):
                inner = dict(env)
                inner[name] = v
                yield from body(inp, inner)
        return run

    def c_reduce(self, node):
        source = self.compile(node[1])
        name = node[2]
        init = self.compile(node[3])
        update = self.compile(node[4])

        def run(inp, env):
            budget = env[BUDGET]
            for acc in init(inp, env):
                for v in source(inp, env):
                    budget.tick()
                    inner = dict(env)
                    inner[name] = v
                    last = None
                    for last in update(acc, inner):
                        pass
                    acc = last
                yield acc
        return run

    def c_call(self, node):
        name, args = node[1], node[2]
        spec = self.builtins.get((name, len(args)))
        if spec is None:
            if any(n == name for n, _ in self.builtins):
                raise JqSyntaxError(f"{name}/{len(args)} is not defined")
            from .errors import Unsupported
            raise Unsupported(f"function {name}/{len(args)} is not in the native subset")
        compiled = [self.compile(a) for a in args]
        return spec(self, compiled, args)


def run_bounded(fn, value, *, max_outputs: int, max_steps: int, seconds: float, env=None):
    """All outputs of a compiled program on one input, within the bounds."""
    budget = Budget(max_steps, seconds)
    scope = {BUDGET: budget}
    if env:
        scope.update(env)
    out = []
    try:
        for v in fn(value, scope):
            out.append(normalize_number(v) if v.__class__ is float else v)
            if len(out) > max_outputs:
                raise JqLimitError(f"evaluation produced more than {max_outputs} outputs")
    except RecursionError:
        raise JqLimitError("value nested too deeply") from None
    return out
