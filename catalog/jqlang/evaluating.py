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

Why one module of this size: the compiler is one dispatch over the AST, and
its node cases share the primitives (``index``, ``iterate``, ``negate``,
``slice_``) that the builtins, the path walker and the generated code import.
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
        self.deadline = None  # the clock starts at the first check: most evaluations never get there
        self.left = self.CHECK_EVERY

    def refill(self):
        self.max_steps -= self.CHECK_EVERY
        if self.max_steps <= 0:
            raise JqLimitError("evaluation exceeded its step bound")
        now = time.perf_counter()
        if self.deadline is None:
            self.deadline = now + self.seconds
        elif now > self.deadline:
            raise JqLimitError(f"evaluation exceeded its time bound of {self.seconds:g}s")
        self.left = self.CHECK_EVERY

    def tick(self, n: int = 1):
        self.left -= n
        if self.left <= 0:
            self.refill()


def truthy(v) -> bool:
    return v is not None and v is not False


def index(container, key):
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


def iterate(value):
    """jq `.[]` on one value: the values of an array or an object (the primitives the evaluator,
    the path walker and the generated code share)."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return list(value.values())
    raise JqRuntimeError(f"Cannot iterate over {type_name(value)}" + (
        "" if value is None else f" ({tojson(value)[:40]})"))


def negate(v):
    """jq unary minus on one value."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise JqRuntimeError(f"{type_name(v)} ({tojson(v)[:40]}) cannot be negated")
    return -v


def slice_(value, lo, hi):
    """jq `.[lo:hi]` on one value (a string, an array or null)."""
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
    """Turns AST tuples into closures.

    `compile(node)` gives ``gen(input, env) -> iterable``; `one(node)` gives
    ``fn(input, env) -> value`` for nodes that always yield exactly one value
    (paths, literals, arithmetic, constructions, most builtins), or None.
    Definitions are mostly such nodes, and a plain call chain is several
    times cheaper than a chain of generators.  One compiler per program.
    """

    def __init__(self, builtins, one_builtins, one_via_gen):
        self.builtins = builtins
        self.one_builtins = one_builtins
        self.one_via_gen = one_via_gen
        self._ones: dict[int, object] = {}
        self._keep = []  # nodes stay alive while their id() keys the memo

    def one(self, node):
        key = id(node)
        if key not in self._ones:
            self._keep.append(node)
            method = getattr(self, "o_" + node[0], None)
            self._ones[key] = method(node) if method else None
        return self._ones[key]

    def compile(self, node):
        one = self.one(node)
        if one is not None:
            return lambda inp, env: (one(inp, env),)
        return getattr(self, "c_" + node[0])(node)

    # -- exactly-one-output forms ------------------------------------------------
    def o_identity(self, node):
        return lambda inp, env: inp

    def o_lit(self, node):
        value = node[1]  # never mutated: every operation builds new values
        return lambda inp, env: value

    def o_var(self, node):
        name = node[1]

        def run(inp, env):
            try:
                return env[name]
            except KeyError:
                raise JqRuntimeError(f"${name} is not defined") from None
        return run

    def o_index(self, node):
        base, key = self.one(node[1]), self.one(node[2])
        if base is None or key is None:
            return None
        if node[2][0] == "lit" and isinstance(node[2][1], str):
            name = node[2][1]
            if node[1] == ("identity",):
                def field(inp, env):
                    if inp.__class__ is dict:
                        return inp.get(name)
                    return index(inp, name)
                return field

            def field_of(inp, env):
                obj = base(inp, env)
                if obj.__class__ is dict:
                    return obj.get(name)
                return index(obj, name)
            return field_of
        return lambda inp, env: index(base(inp, env), key(inp, env))

    def o_slice(self, node):
        base = self.one(node[1])
        lo = self.one(node[2]) if node[2] is not None else (lambda inp, env: None)
        hi = self.one(node[3]) if node[3] is not None else (lambda inp, env: None)
        if base is None or lo is None or hi is None:
            return None
        return lambda inp, env: slice_(base(inp, env), lo(inp, env), hi(inp, env))

    def o_pipe(self, node):
        left, right = self.one(node[1]), self.one(node[2])
        if left is None or right is None:
            return None
        return lambda inp, env: right(left(inp, env), env)

    def o_alt(self, node):
        left, right = self.one(node[1]), self.one(node[2])
        if left is None or right is None:
            return None

        def run(inp, env):
            v = left(inp, env)
            return v if v is not None and v is not False else right(inp, env)
        return run

    def o_and(self, node):
        left, right = self.one(node[1]), self.one(node[2])
        if left is None or right is None:
            return None
        return lambda inp, env: truthy(left(inp, env)) and truthy(right(inp, env))

    def o_or(self, node):
        left, right = self.one(node[1]), self.one(node[2])
        if left is None or right is None:
            return None
        return lambda inp, env: truthy(left(inp, env)) or truthy(right(inp, env))

    def o_neg(self, node):
        inner = self.one(node[1])
        if inner is None:
            return None
        return lambda inp, env: negate(inner(inp, env))

    def o_binop(self, node):
        fn = self._BINOPS[node[1]]
        left, right = self.one(node[2]), self.one(node[3])
        if left is None or right is None:
            return None

        def run(inp, env):
            b = right(inp, env)
            return fn(left(inp, env), b)
        return run

    def o_array(self, node):
        inner = self.compile(node[1])

        def run(inp, env):
            out = list(inner(inp, env))
            env[BUDGET].tick(len(out) + 1)
            return out
        return run

    def o_object(self, node):
        entries = [(self.one(k), self.one(v)) for k, v in node[1]]
        if any(k is None or v is None for k, v in entries):
            return None

        def run(inp, env):
            obj = {}
            for key_fn, value_fn in entries:
                k = key_fn(inp, env)
                if not isinstance(k, str):
                    raise JqRuntimeError(f"Object keys must be strings (got {type_name(k)})")
                obj[k] = value_fn(inp, env)
            return obj
        return run

    def o_interp(self, node):
        parts = [p if isinstance(p, str) else self.one(p) for p in node[1]]
        if any(p is None for p in parts):
            return None

        def run(inp, env):
            out = "".join(p if isinstance(p, str) else tostring(p(inp, env)) for p in parts)
            if len(out) > MAX_SIZE:
                raise JqLimitError("string exceeded the size bound")
            return out
        return run

    def o_if(self, node):
        cond, then = self.one(node[1]), self.one(node[2])
        other = self.one(node[3]) if node[3] is not None else (lambda inp, env: inp)
        if cond is None or then is None or other is None:
            return None
        return lambda inp, env: then(inp, env) if truthy(cond(inp, env)) else other(inp, env)

    def o_as(self, node):
        source, body = self.one(node[1]), self.one(node[3])
        if source is None or body is None:
            return None
        name = node[2]

        def run(inp, env):
            inner = dict(env)
            inner[name] = source(inp, env)
            return body(inp, inner)
        return run

    def o_reduce(self, node):
        init = self.one(node[3])
        if init is None:
            return None
        source = self.compile(node[1])
        name = node[2]
        update = self.compile(node[4])

        return lambda inp, env: _reduce(init(inp, env), source, name, update, inp, env)

    def o_call(self, node):
        name, args = node[1], node[2]
        key = (name, len(args))
        if key in self.one_builtins:
            ones = [self.one(a) for a in args]
            if all(o is not None for o in ones):
                return self.one_builtins[key](self, ones)
            return None
        if name in self.one_via_gen and key in self.builtins:
            run = self.builtins[key](self, [self.compile(a) for a in args], args)
            return lambda inp, env: run(inp, env)[0]
        return None

    def c_index(self, node):
        base = self.compile(node[1])
        key = self.compile(node[2])

        def run(inp, env):
            for k in key(inp, env):
                for obj in base(inp, env):
                    yield index(obj, k)
        return run

    def c_slice(self, node):
        base = self.compile(node[1])
        lo = self.compile(node[2]) if node[2] is not None else (lambda inp, env: (None,))
        hi = self.compile(node[3]) if node[3] is not None else (lambda inp, env: (None,))

        def run(inp, env):
            for h in hi(inp, env):
                for low in lo(inp, env):
                    for obj in base(inp, env):
                        yield slice_(obj, low, h)
        return run

    def c_iter(self, node):
        base = self.compile(node[1])

        def run(inp, env):
            budget = env[BUDGET]
            for obj in base(inp, env):
                items = iterate(obj)
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
                yield negate(v)
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

        def run(inp, env):
            for b in right(inp, env):
                for a in left(inp, env):
                    yield fn(a, b)
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
                        items = iterate(obj)
                    except JqRuntimeError:
                        continue
                    budget.tick(len(items) + 1)
                    yield from items
            elif tag == "index":
                for k in key(inp, env):
                    for obj in base(inp, env):
                        try:
                            yield index(obj, k)
                        except JqRuntimeError:
                            pass
            else:
                for h in hi(inp, env):
                    for low in lo(inp, env):
                        for obj in base(inp, env):
                            try:
                                yield slice_(obj, low, h)
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
            for acc in init(inp, env):
                yield _reduce(acc, source, name, update, inp, env)
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


def _reduce(acc, source, name, update, inp, env):
    """`reduce SOURCE as $name (acc; UPDATE)`: the last output of UPDATE per item (null if none)."""
    budget = env[BUDGET]
    inner = dict(env)
    for v in source(inp, env):
        budget.tick()
        inner[name] = v
        last = None
        for last in update(acc, inner):
            pass
        acc = last
    return acc


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
