"""Generating Python code from jq programs: straight-line code instead of closures.

The closures of ``evaluating.py`` cost a Python call per AST node and a
generator per multi-output node.  A definition is read on every event of the
pipeline, so its programs are also turned into Python *code*: this module
builds, from the parsed jq AST, a Python ``ast`` of statements and
expressions (``dict.get`` chains, conditional expressions, plain ``for``
loops) that compute the same outputs, and ``catalog/compiling.py`` assembles
the programs of one definition into one function per definition.

Safety: nothing of a definition's text ever becomes Python source.  The code
is an AST built node by node here; strings and numbers of a definition enter
it only as ``ast.Constant`` values, and other values (list and object
literals, the reference programs) as names bound in the function's namespace.

Exactness: generated code computes exactly what the closures compute, or
gives up by raising :class:`Bail`, and the caller then evaluates the
reference way.  It gives up on every error (jq's errors and ours, so the
messages and the bounds are the reference's own), on evaluations that reach
the step count where the reference budget would first consult its clock
(:data:`STEP_LIMIT`), and on reads of paths it evaluated ahead of need that
would have failed.  Constructs it does not generate (``reduce``, ``try``,
most generator builtins) leave their whole program to the reference
evaluation (:class:`Unsupported` from here).

Why one module of this size: it is one code generator over the AST whose node
cases share the scope and statement bookkeeping, and the exactness argument
above holds for it as a whole.
"""

from __future__ import annotations

import ast
import math

from . import matching
from .builtins import VALUE_FUNCTIONS
from .errors import JqRuntimeError, Unsupported
from .evaluating import Budget, Compiler, index, iterate, negate, slice_
from .values import MAX_SIZE, compare, jq_add, jq_div, jq_mod, jq_mul, jq_sub, normalize_number, tostring

# The reference budget consults its clock (and could raise) only once this many steps are
# ticked; below it, evaluation is deterministic, so generated code that stops here is exact.
STEP_LIMIT = Budget.CHECK_EVERY


class Bail(Exception):
    """Generated code met a case it leaves to the reference evaluation."""


def _bail(*_):
    raise Bail


def _get(value, key):
    """`.key` of a non-object: null on null; anything else is an error (left to the reference)."""
    if value is None:
        return None
    raise Bail


def _iterate_opt(value):
    """`.[]?`'s items, or None where `.[]` would fail."""
    if value.__class__ is list:
        return value
    if value.__class__ is dict:
        return list(value.values())
    return None


def _index_opt(container, key, missing):
    """`.[key]?`: the value, or `missing` where `.[key]` would fail (as the closures, only
    jq's own errors are caught)."""
    try:
        return index(container, key)
    except JqRuntimeError:
        return missing


def _key(k):
    if k.__class__ is not str:
        raise Bail
    return k


def _interp(*parts):
    out = "".join(p if p.__class__ is str else tostring(p) for p in parts)
    if len(out) > MAX_SIZE:
        raise Bail
    return out


def _objects(*columns):
    """Every object of an object construction: columns are the outputs of key 1, value 1,
    key 2, value 2, ...; the product in the closures' order."""
    results = [{}]
    for i in range(0, len(columns), 2):
        keys, values = columns[i], columns[i + 1]
        for k in keys:
            if k.__class__ is not str:
                raise Bail
        grown = []
        for partial in results:
            for k in keys:
                for v in values:
                    obj = dict(partial)
                    obj[k] = v
                    grown.append(obj)
        results = grown
        if len(results) >= STEP_LIMIT:
            raise Bail
    return results


def _combinations(*columns):
    """The steps the closures tick building those objects: one per partial object grown."""
    half = len(columns) // 2
    ticks, count = 0, 1
    for keys, values in zip(columns[:half], columns[half:]):
        count *= len(keys) * len(values)
        ticks += count
    return ticks


def _is_number(v):
    """A number Python compares as jq does (NaN is not: jq's ordering puts it equal to all)."""
    return v.__class__ is int or (v.__class__ is float and v == v)


def _lt(a, b):
    return compare(a, b) < 0


def _le(a, b):
    return compare(a, b) <= 0


def _gt(a, b):
    return compare(a, b) > 0


def _ge(a, b):
    return compare(a, b) >= 0


def _eq(a, b):
    return compare(a, b) == 0


def _ne(a, b):
    return compare(a, b) != 0


RUNTIME = {
    "_Bail": Bail, "_bail": _bail, "_get": _get, "_index": index, "_iterate": iterate,
    "_iterate_opt": _iterate_opt, "_index_opt": _index_opt, "_key": _key, "_interp": _interp,
    "_negate": negate, "_slice": slice_, "_norm": normalize_number, "_test": matching.test,
    "_objects": _objects, "_combinations": _combinations, "_is_number": _is_number, "_lt": _lt, "_le": _le, "_gt": _gt, "_ge": _ge, "_eq": _eq, "_ne": _ne,
    "_add": jq_add, "_sub": jq_sub, "_mul": jq_mul, "_div": jq_div, "_mod": jq_mod,
}
_ARITH = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div", "%": "_mod"}
_COMPARE = {"==": "_eq", "!=": "_ne", "<": "_lt", "<=": "_le", ">": "_gt", ">=": "_ge"}
_PY_COMPARE = {"==": ast.Eq, "!=": ast.NotEq, "<": ast.Lt, "<=": ast.LtE, ">": ast.Gt, ">=": ast.GtE}
_MISSING = object()
RUNTIME["_MISSING"] = _MISSING
RUNTIME["_JqRuntimeError"] = JqRuntimeError


# -- small AST builders (our own code shapes only; values enter as constants) -------------------
def name(id_: str) -> ast.Name:
    return ast.Name(id=id_, ctx=ast.Load())


def store(id_: str) -> ast.Name:
    return ast.Name(id=id_, ctx=ast.Store())


def const(value) -> ast.Constant:
    return ast.Constant(value=value)


def call(fn: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=name(fn), args=list(args), keywords=[])


def method(obj: ast.expr, meth: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=obj, attr=meth, ctx=ast.Load()), args=list(args), keywords=[])


def assign(target: str, value: ast.expr) -> ast.Assign:
    return ast.Assign(targets=[store(target)], value=value, lineno=0)


def is_(a: ast.expr, b: ast.expr) -> ast.Compare:
    return ast.Compare(left=a, ops=[ast.Is()], comparators=[b])


def is_not(a: ast.expr, b: ast.expr) -> ast.Compare:
    return ast.Compare(left=a, ops=[ast.IsNot()], comparators=[b])


def class_of(e: ast.expr) -> ast.Attribute:
    return ast.Attribute(value=e, attr="__class__", ctx=ast.Load())


def truthy(e: ast.expr) -> ast.expr:
    """jq truthiness of a *simple* expression (a name or a constant): not null and not false.
    A constant's is decided here (`0 is not None` would be an identity test on a literal,
    which Python warns about)."""
    if isinstance(e, ast.Constant):
        return const(e.value is not None and e.value is not False)
    return ast.BoolOp(op=ast.And(), values=[is_not(e, const(None)), is_not(e, const(False))])


def falsy(e: ast.expr) -> ast.expr:
    if isinstance(e, ast.Constant):
        return const(e.value is None or e.value is False)
    return ast.BoolOp(op=ast.Or(), values=[is_(e, const(None)), is_(e, const(False))])


def _iterated(e: ast.expr) -> ast.expr:
    """`.[]`'s items of a simple expression: a list is its own items; the rest by the call."""
    if not isinstance(e, ast.Name):
        return call("_iterate", e)
    return ast.IfExp(test=is_(class_of(e), name("list")), body=e, orelse=call("_iterate", e))


def _item(e: ast.Name, i: int) -> ast.expr:
    """`.[i]` of a name: an item a list has (i >= 0 below its length; -1 of a non-empty one)
    inline, the rest (past the end, other values, errors) by jq's index."""
    if i >= 0:
        has = ast.Compare(left=call("len", e), ops=[ast.Gt()], comparators=[const(i)])
    else:
        has = e   # a non-empty list
    test = ast.BoolOp(op=ast.And(), values=[is_(class_of(e), name("list")), has])
    return ast.IfExp(test=test, body=ast.Subscript(value=e, slice=const(i), ctx=ast.Load()),
                     orelse=call("_index", e, const(i)))


def _fast_add(a: ast.Name, b: ast.Name) -> ast.expr:
    """`a + b` of two names: two ints, two objects (merged, the right one's keys winning, in
    the order `dict.update` gives) and two lists within the size bound inline, the rest by jq_add."""
    def both(cls):
        return ast.BoolOp(op=ast.And(), values=[is_(class_of(a), name(cls)), is_(class_of(b), name(cls))])
    merged = ast.Dict(keys=[None, None], values=[a, b])
    joined = ast.BinOp(left=a, op=ast.Add(), right=b)
    small = ast.Compare(left=ast.BinOp(left=call("len", a), op=ast.Add(), right=call("len", b)), ops=[ast.LtE()],
                        comparators=[const(MAX_SIZE)])
    return ast.IfExp(test=both("int"), body=joined, orelse=ast.IfExp(test=both("dict"), body=merged, orelse=ast.IfExp(
        test=ast.BoolOp(op=ast.And(), values=[both("list"), small]), body=joined, orelse=call("_add", a, b))))


def _assign_all(targets: list[str], value: ast.expr) -> ast.Assign:
    """`a = b = c = value`."""
    return ast.Assign(targets=[store(t) for t in targets], value=value, lineno=0)


def if_(test: ast.expr, body: list, orelse: list | None = None) -> ast.If:
    return ast.If(test=test, body=body or [ast.Pass()], orelse=orelse or [])


def for_(target: str, iterable: ast.expr, body: list) -> ast.For:
    return ast.For(target=store(target), iter=iterable, body=body or [ast.Pass()], orelse=[], lineno=0)


def raise_bail() -> ast.Raise:
    return ast.Raise(exc=name("_Bail"), cause=None)


def simple(e: ast.expr) -> bool:
    return isinstance(e, (ast.Name, ast.Constant))


def _is_path(node) -> bool:
    """`.a.b["c"]` from the input: read once per function by the prologue instead."""
    while node[0] == "index" and node[2][0] == "lit" and isinstance(node[2][1], str):
        node = node[1]
    return node == ("identity",)


def _children(node) -> list:
    """Every sub-node of a node (values of literals are not nodes)."""
    tag = node[0]
    if tag in ("lit", "identity", "var"):
        return []
    if tag == "call":
        return list(node[2])
    if tag == "object":
        return [part for entry in node[1] for part in entry]
    if tag == "interp":
        return [p for p in node[1] if not isinstance(p, str)]
    if tag in ("as", "reduce"):
        return [x for x in node[1:] if isinstance(x, tuple)]
    if tag == "binop":
        return [node[2], node[3]]
    return [x for x in node[1:] if isinstance(x, tuple)]


def _free_vars(node, bound=frozenset()) -> set:
    if node[0] == "var":
        return set() if node[1] in bound else {node[1]}
    if node[0] == "as":
        return _free_vars(node[1], bound) | _free_vars(node[3], bound | {node[2]})
    out: set = set()
    for child in _children(node):
        out |= _free_vars(child, bound)
    return out


def _same_input_children(node) -> list:
    """The sub-nodes evaluated on the node's own input (not on a value it computed)."""
    tag = node[0]
    if tag == "pipe":
        return [node[1]]
    if tag == "opt":
        return []
    if tag == "call" and (node[1], len(node[2])) not in _PURE_CALLS and node[1] != "select":
        return []   # map(f), any(f), ...: f runs on each item
    return _children(node)


# constructs whose one output depends only on their input, without ticking the budget
_PURE_TAGS = {"index", "slice", "pipe", "alt", "and", "or", "neg", "binop", "object", "interp", "if", "lit",
              "identity", "call", "as", "var"}
_PURE_CALLS = set(VALUE_FUNCTIONS) | {("test", 2)}
_UNSET = object()
RUNTIME["_UNSET"] = _UNSET

SMALL_CONTINUATION = 40   # AST nodes a continuation may have and still be written out twice
MAX_PROGRAM_NODES = 20_000  # larger generated programs are left to the reference closures


def _size(stmts) -> int:
    return sum(1 for stmt in stmts for _ in ast.walk(stmt))


class ProgramCode:
    """A program as code: run `stmts`, then `value` is its single output (`one`) or the
    name of the list of its outputs."""

    __slots__ = ("stmts", "value", "one")

    def __init__(self, stmts: list, value: ast.expr, one: bool):
        self.stmts = stmts
        self.value = value
        self.one = one


class Generator:
    """Builds the code of jq programs that all read one input, the root object.

    Paths of plain object keys from the root (``.spec.components.proxy``) are
    read once per function, whatever program and branch reads them: they are
    collected here and evaluated in the function's prologue (:meth:`prologue`).
    """

    def __init__(self, namespace: dict, root: str = "obj"):
        self.ns = namespace
        self.ns.update(RUNTIME)
        self.ns.update({f"_f_{n}_{a}": f for (n, a), f in VALUE_FUNCTIONS.items()})
        self.root = root
        self._n = 0
        self.paths: dict[tuple, str] = {}
        self._steps = None
        self._ticked = False
        self.bools: set[str] = set()        # temporaries known to hold a Python bool
        self._uses: dict[str, int] = {}     # sub-expressions on the root, by uses (see plan)
        self.memos: dict[str, str] = {}     # sub-expression -> its memo local
        from .builtins import BUILTINS, ONE_BUILTINS, ONE_VIA_GEN

        # only to know which nodes the reference runs as one-output forms
        self._oracle = Compiler(BUILTINS, ONE_BUILTINS, ONE_VIA_GEN)

    # -- helpers -------------------------------------------------------------------------
    def tmp(self, prefix: str = "t") -> str:
        self._n += 1
        return f"_{prefix}{self._n}"

    def bind_const(self, value) -> ast.expr:
        if value is None or isinstance(value, (bool, int, float, str)):
            return const(value)
        key = self.tmp("k")
        self.ns[key] = value   # list/object literals: shared, never mutated (as the closures share them)
        return name(key)

    def _tick(self, amount: ast.expr) -> list:
        s = self._steps
        self._ticked = True
        return [ast.AugAssign(target=store(s), op=ast.Add(), value=amount),
                if_(ast.Compare(left=name(s), ops=[ast.GtE()], comparators=[const(STEP_LIMIT)]), [raise_bail()])]

    def _simple(self, stmts: list, e: ast.expr) -> ast.expr:
        """`e` as a name or constant (binding it to a temporary in `stmts` if needed)."""
        if simple(e):
            return e
        t = self.tmp()
        stmts.append(assign(t, e))
        if self.is_bool(e):
            self.bools.add(t)
        return name(t)

    _BOOL_CALLS = {"_eq", "_ne", "_lt", "_le", "_gt", "_ge", "_test", "_f_not_0", "_f_test_1", "_f_startswith_1",
                   "_f_endswith_1", "_f_has_1", "_f_contains_1", "_f_inside_1", "_f_in_1"}

    def is_bool(self, e: ast.expr) -> bool:
        """Whether `e` surely evaluates to a Python bool (so its jq truthiness is itself)."""
        if isinstance(e, ast.Name):
            return e.id in self.bools
        if isinstance(e, ast.Constant):
            return isinstance(e.value, bool)
        if isinstance(e, (ast.Compare, ast.UnaryOp)) and (not isinstance(e, ast.UnaryOp) or isinstance(e.op, ast.Not)):
            return True
        if isinstance(e, ast.BoolOp):
            return all(self.is_bool(v) for v in e.values)
        if isinstance(e, ast.IfExp):
            return self.is_bool(e.body) and self.is_bool(e.orelse)
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name):
            return e.func.id in self._BOOL_CALLS
        return False

    def truthy(self, e: ast.expr) -> ast.expr:
        return e if self.is_bool(e) else truthy(e)

    def falsy(self, e: ast.expr) -> ast.expr:
        return ast.UnaryOp(op=ast.Not(), operand=e) if self.is_bool(e) else falsy(e)

    def is_one(self, node) -> bool:
        return self._oracle.one(node) is not None

    # -- programs ------------------------------------------------------------------------
    def program(self, program, inp: ast.expr | None = None) -> ProgramCode:
        """Code for one compiled Program on the root (or `inp`); Unsupported if not generated."""
        from .parsing import parse

        if not program.native:
            raise Unsupported("not in the native subset")
        node = parse(program.source)
        inp = inp if inp is not None else name(self.root)
        self._steps = self.tmp("s")
        self._ticked = False
        stmts: list = []
        if program._one is not None:
            value = self.value(node, inp, {}, stmts)
            if _size(stmts) > MAX_PROGRAM_NODES:
                raise Unsupported("generated code too large")
            if self._may_be_float(node) and not self.is_bool(value):
                v = self._simple(stmts, value)
                value = ast.IfExp(test=is_(class_of(v), name("float")), body=call("_norm", v), orelse=v)
            return ProgramCode(self._counted(stmts), value, True)
        out = self.tmp("o")
        stmts.append(assign(out, ast.List(elts=[], ctx=ast.Load())))

        def emit(v):
            return [ast.Expr(value=method(name(out), "append", ast.IfExp(
                test=is_(class_of(v), name("float")), body=call("_norm", v), orelse=v)))]
        stmts += self.each(node, inp, {}, emit)
        if _size(stmts) > MAX_PROGRAM_NODES:
            raise Unsupported("generated code too large")
        return ProgramCode(self._counted(stmts), name(out), False)

    def _counted(self, stmts: list) -> list:
        """The program's statements, with its step counter set first if anything ticks it."""
        return [assign(self._steps, const(0))] + stmts if self._ticked else stmts

    @staticmethod
    def _may_be_float(node) -> bool:
        tag = node[0]
        if tag == "lit":
            return isinstance(node[1], float)
        if tag in ("and", "or", "array", "object", "interp"):
            return False
        if tag == "binop" and node[1] in _COMPARE:
            return False
        return True

    # -- sub-expressions shared by programs -------------------------------------------------
    def plan(self, programs) -> None:
        """Count what the programs of one function evaluate on the root object, so that a
        sub-expression they repeat (Milvus's version test guards replicas and min replicas of
        five components) is computed once per object, where it is first needed."""
        from .parsing import parse

        for program in programs:
            if program is not None and program.native:
                self._count(parse(program.source))

    def _count(self, node) -> None:
        if self._memoizable(node):
            key = repr(node)
            seen = self._uses.get(key, 0)
            self._uses[key] = seen + 1
            if seen:
                return   # its parts are computed once, within it
        for child in _same_input_children(node):
            self._count(child)

    def _memoizable(self, node) -> bool:
        """A sub-expression worth computing once: one output, a function of the input alone
        (no free variable), no step ticked, more than a path or a literal."""
        if node[0] in ("identity", "lit", "var") or _is_path(node):
            return False
        cost = 0
        stack = [node]
        while stack:
            n = stack.pop()
            tag = n[0]
            if tag not in _PURE_TAGS or (tag == "call" and (n[1], len(n[2])) not in _PURE_CALLS) \
                    or not self.is_one(n):
                return False
            cost += tag not in ("lit", "identity", "index")
            stack += _children(n)
        return cost >= 3 and not _free_vars(node)

    def prologue(self) -> list:
        """Statements reading every collected root path once, parents first, and marking
        every shared sub-expression as not computed yet."""
        out = [_assign_all(list(self.memos.values()), name("_UNSET"))] if self.memos else []
        children: dict[tuple, list] = {}
        for chain in self.paths:
            children.setdefault(chain[:-1], []).append(chain)
        return out + self._read_paths((), name(self.root), children)

    def _read_paths(self, chain: tuple, parent: ast.expr, children: dict) -> list:
        """The reads of the paths under `chain` (held in `parent`), grouped by parent: one type
        test per parent, and every path under a missing (null) parent is null without a read
        (a Milvus lists a dozen components, most of them absent).  A parent that is neither an
        object nor null bails, as reading a key of it (`_get`) would."""
        kids = sorted(children.get(chain, ()))
        if not kids:
            return []
        reads: list = []
        for kid in kids:
            reads.append(assign(self.paths[kid], method(parent, "get", const(kid[-1]))))
        for kid in kids:
            reads += self._read_paths(kid, name(self.paths[kid]), children)
        below = [self.paths[p] for p in sorted(self.paths) if len(p) > len(chain) and p[:len(chain)] == chain]
        return [if_(is_(class_of(parent), name("dict")), reads,
                    [if_(is_(parent, const(None)), [_assign_all(below, const(None))], [raise_bail()])])]

    def _root_path(self, node, inp: ast.expr):
        """The hoisted local of `.a.b.c` on the root input, or None."""
        if not (isinstance(inp, ast.Name) and inp.id == self.root):
            return None
        keys = []
        while node[0] == "index" and node[2][0] == "lit" and isinstance(node[2][1], str):
            keys.append(node[2][1])
            node = node[1]
        if node != ("identity",) or not keys:
            return None
        chain = tuple(reversed(keys))
        for i in range(1, len(chain) + 1):
            if chain[:i] not in self.paths:
                self.paths[chain[:i]] = self.tmp("p")
        return name(self.paths[chain])

    # -- one-output nodes ------------------------------------------------------------------
    def value(self, node, inp: ast.expr, scope: dict, stmts: list) -> ast.expr:
        """An expression of the single output of `node` on `inp` (a simple expression);
        statements it needs first are appended to `stmts`."""
        if not self.is_one(node):
            raise Unsupported("a generator where one output is needed")
        if self._uses and isinstance(inp, ast.Name) and inp.id == self.root:
            key = repr(node)
            if self._uses.get(key, 0) >= 2:
                memo = self.memos.get(key)
                if memo is None:
                    memo = self.memos[key] = self.tmp("c")
                inner: list = []
                v = self._value(node, inp, scope, inner)
                if self.is_bool(v):
                    self.bools.add(memo)
                stmts.append(if_(is_(name(memo), name("_UNSET")), inner + [assign(memo, v)]))
                return name(memo)
        return self._value(node, inp, scope, stmts)

    def _value(self, node, inp, scope, stmts):
        tag = node[0]
        handler = getattr(self, "v_" + tag, None)
        if handler is None:
            raise Unsupported(tag)
        return handler(node, inp, scope, stmts)

    def v_identity(self, node, inp, scope, stmts):
        return inp

    def v_lit(self, node, inp, scope, stmts):
        return self.bind_const(node[1])

    def v_var(self, node, inp, scope, stmts):
        if node[1] not in scope:
            raise Unsupported(f"${node[1]} is not bound")
        return name(scope[node[1]])

    def v_index(self, node, inp, scope, stmts):
        hoisted = self._root_path(node, inp)
        if hoisted is not None:
            return hoisted
        base = self._simple(stmts, self.value(node[1], inp, scope, stmts))
        if node[2][0] == "lit" and isinstance(node[2][1], str):
            key = const(node[2][1])
            other = call("_index", base, key)
            if not isinstance(base, ast.Constant):   # `.key` of null is null, without a call
                other = ast.IfExp(test=is_(base, const(None)), body=const(None), orelse=other)
            return ast.IfExp(test=is_(class_of(base), name("dict")), body=method(base, "get", key), orelse=other)
        key = self.value(node[2], inp, scope, stmts)
        if isinstance(key, ast.Constant) and key.value.__class__ is int and key.value >= 0 \
                and isinstance(base, ast.Name):
            return _item(base, key.value)
        return call("_index", base, key)

    def v_slice(self, node, inp, scope, stmts):
        base = self.value(node[1], inp, scope, stmts)
        lo = self.value(node[2], inp, scope, stmts) if node[2] is not None else const(None)
        hi = self.value(node[3], inp, scope, stmts) if node[3] is not None else const(None)
        return call("_slice", base, lo, hi)

    def v_pipe(self, node, inp, scope, stmts):
        mid = self._simple(stmts, self.value(node[1], inp, scope, stmts))
        return self.value(node[2], mid, scope, stmts)

    def _branch(self, node, inp, scope) -> tuple[list, ast.expr]:
        inner: list = []
        return inner, self.value(node, inp, scope, inner)

    def v_alt(self, node, inp, scope, stmts):
        left = self._simple(stmts, self.value(node[1], inp, scope, stmts))
        rs, right = self._branch(node[2], inp, scope)
        if not rs:
            return ast.IfExp(test=self.truthy(left), body=left, orelse=right)
        t = self.tmp()
        stmts.append(assign(t, left))
        stmts.append(if_(falsy(name(t)), rs + [assign(t, right)]))
        return name(t)

    def _logic(self, node, inp, scope, stmts, is_and: bool):
        left = self._simple(stmts, self.value(node[1], inp, scope, stmts))
        rs, right = self._branch(node[2], inp, scope)
        t = self.tmp()
        self.bools.add(t)
        stmts.append(assign(t, self.truthy(left)))
        rs = list(rs)
        r = self._simple(rs, right)
        rs.append(assign(t, self.truthy(r)))
        stmts.append(if_(name(t) if is_and else ast.UnaryOp(op=ast.Not(), operand=name(t)), rs))
        return name(t)

    def v_and(self, node, inp, scope, stmts):
        return self._logic(node, inp, scope, stmts, True)

    def v_or(self, node, inp, scope, stmts):
        return self._logic(node, inp, scope, stmts, False)

    def v_neg(self, node, inp, scope, stmts):
        return call("_negate", self.value(node[1], inp, scope, stmts))

    def v_binop(self, node, inp, scope, stmts):
        op = node[1]
        right = self._simple(stmts, self.value(node[3], inp, scope, stmts))
        left = self._simple(stmts, self.value(node[2], inp, scope, stmts))
        if op in _ARITH:
            if op == "+" and isinstance(left, ast.Name) and isinstance(right, ast.Name):
                return _fast_add(left, right)
            if op == "+" and {left.__class__, right.__class__} == {ast.Name, ast.Constant}:
                n, c = (left, right) if isinstance(left, ast.Name) else (right, left)
                if c.value.__class__ is int:   # `. + 1`: an int inline
                    return ast.IfExp(test=is_(class_of(n), name("int")), body=ast.BinOp(left=left, op=ast.Add(),
                                     right=right), orelse=call("_add", left, right))
            return call(_ARITH[op], left, right)
        lit = right if isinstance(right, ast.Constant) else left if isinstance(left, ast.Constant) else None
        other = left if lit is right else right
        if isinstance(other, ast.Constant):
            return call(_COMPARE[op], left, right)  # two literals: rare, and Python warns on `1 is None`
        if lit is not None and op in ("==", "!="):
            v = lit.value
            if v is None or isinstance(v, bool):
                test = is_(other, lit)   # null/true/false equal only themselves
            elif isinstance(v, str):
                test = ast.Compare(left=other, ops=[ast.Eq()], comparators=[lit])  # str == str only
            else:
                test = None
            if test is not None:
                return test if op == "==" else ast.UnaryOp(op=ast.Not(), operand=test)
        if lit is not None and isinstance(lit.value, (int, float)) and not isinstance(lit.value, bool) \
                and not (isinstance(lit.value, float) and math.isnan(lit.value)):
            # numbers compare as numbers; anything else by jq's ordering
            # (an int inline; a float, rarer, by the same ordering through the call)
            num = ast.Compare(left=left, ops=[_PY_COMPARE[op]()], comparators=[right])
            return ast.IfExp(test=is_(class_of(other), name("int")), body=num, orelse=call(_COMPARE[op], left, right))
        if lit is None:
            # two strings or two ints: jq orders them as Python does (values.compare)
            same = ast.BoolOp(op=ast.Or(), values=[
                ast.BoolOp(op=ast.And(), values=[is_(class_of(left), name("str")), is_(class_of(right), name("str"))]),
                ast.BoolOp(op=ast.And(), values=[is_(class_of(left), name("int")), is_(class_of(right), name("int"))])])
            return ast.IfExp(test=same, body=ast.Compare(left=left, ops=[_PY_COMPARE[op]()], comparators=[right]),
                             orelse=call(_COMPARE[op], left, right))
        return call(_COMPARE[op], left, right)

    def v_array(self, node, inp, scope, stmts):
        out = self.tmp("a")
        stmts.append(assign(out, ast.List(elts=[], ctx=ast.Load())))
        stmts += self.each(node[1], inp, scope, lambda v: [ast.Expr(value=method(name(out), "append", v))])
        stmts += self._tick(ast.BinOp(left=call("len", name(out)), op=ast.Add(), right=const(1)))
        return name(out)

    def v_object(self, node, inp, scope, stmts):
        keys, values = [], []
        for k, v in node[1]:
            if k[0] == "lit" and isinstance(k[1], str):
                keys.append(const(k[1]))
            else:
                keys.append(call("_key", self._simple(stmts, self.value(k, inp, scope, stmts))))
            values.append(self._simple(stmts, self.value(v, inp, scope, stmts)))
        return ast.Dict(keys=keys, values=values)

    def v_interp(self, node, inp, scope, stmts):
        parts = [const(p) if isinstance(p, str) else self._simple(stmts, self.value(p, inp, scope, stmts))
                 for p in node[1]]
        return call("_interp", *parts)

    def v_if(self, node, inp, scope, stmts):
        cond = self._simple(stmts, self.value(node[1], inp, scope, stmts))
        ts, then = self._branch(node[2], inp, scope)
        if node[3] is not None:
            es, other = self._branch(node[3], inp, scope)
        else:
            es, other = [], inp
        if not ts and not es:
            return ast.IfExp(test=self.truthy(cond), body=then, orelse=other)
        t = self.tmp()
        if self.is_bool(then) and self.is_bool(other):
            self.bools.add(t)
        stmts.append(if_(self.truthy(cond), ts + [assign(t, then)], es + [assign(t, other)]))
        return name(t)

    def v_as(self, node, inp, scope, stmts):
        v = self.tmp("v")
        stmts.append(assign(v, self.value(node[1], inp, scope, stmts)))
        return self.value(node[3], inp, {**scope, node[2]: v}, stmts)

    def v_call(self, node, inp, scope, stmts):
        fname, args = node[1], node[2]
        key = (fname, len(args))
        if key in VALUE_FUNCTIONS:
            vals = [self._simple(stmts, self.value(a, inp, scope, stmts)) for a in args]
            if key in (("first", 0), ("last", 0)) and isinstance(inp, ast.Name):
                return _item(inp, 0) if fname == "first" else _item(inp, -1)
            if key == ("length", 0) and isinstance(inp, ast.Name):
                return ast.IfExp(test=is_(class_of(inp), name("list")), body=call("len", inp),
                                 orelse=call("_f_length_0", inp))
            return call(f"_f_{fname}_{len(args)}", inp, *vals)
        if key == ("test", 2):
            vals = [self._simple(stmts, self.value(a, inp, scope, stmts)) for a in args]
            return call("_test", inp, *vals)
        if key == ("map", 1):
            out, item = self.tmp("a"), self.tmp("i")
            stmts.append(assign(out, ast.List(elts=[], ctx=ast.Load())))
            body = self._tick(const(1)) + self.each(
                args[0], name(item), scope, lambda v: [ast.Expr(value=method(name(out), "append", v))])
            stmts.append(for_(item, _iterated(inp), body))
            return name(out)
        if key == ("with_entries", 1):
            entries, mapped, item = self.tmp("l"), self.tmp("a"), self.tmp("i")
            stmts.append(assign(entries, call("_f_to_entries_0", inp)))
            stmts += self._tick(call("len", name(entries)))
            stmts.append(assign(mapped, ast.List(elts=[], ctx=ast.Load())))
            stmts.append(for_(item, name(entries), self.each(
                args[0], name(item), scope, lambda v: [ast.Expr(value=method(name(mapped), "append", v))])))
            return call("_f_from_entries_0", name(mapped))
        if key in (("any", 1), ("all", 1)):
            is_any = fname == "any"
            if not self.is_one(args[0]):
                raise Unsupported(f"{fname} with a generator condition")
            out, item = self.tmp(), self.tmp("i")
            stmts.append(assign(out, const(not is_any)))
            body: list = []
            ok = self._simple(body, self.value(args[0], name(item), scope, body))
            hit = self.truthy(ok) if is_any else self.falsy(ok)
            body.append(if_(hit, [assign(out, const(is_any)), ast.Break()]))
            stmts.append(for_(item, _iterated(inp), body))
            return name(out)
        raise Unsupported(f"{fname}/{len(args)}")

    # -- generator nodes ------------------------------------------------------------------
    def each(self, node, inp: ast.expr, scope: dict, emit) -> list:
        """Statements that run `emit(output)` for every output of `node`, in jq's order."""
        if self.is_one(node):
            stmts: list = []
            v = self._simple(stmts, self.value(node, inp, scope, stmts))
            return stmts + emit(v)
        handler = getattr(self, "g_" + node[0], None)
        if handler is None:
            raise Unsupported(node[0])
        return handler(node, inp, scope, emit)

    def _bound(self, emit):
        """An emit that binds its value to a fresh name first (so it can be used twice)."""
        def bound(v):
            if simple(v):
                return emit(v)
            t = self.tmp()
            if self.is_bool(v):
                self.bools.add(t)
            return [assign(t, v)] + emit(name(t))
        return bound

    def _shared(self, emit, build) -> list:
        """`build(emit)` for a construct that emits from several places.  The continuation is
        generated once: a small one is written out at each place, a large one once, over the
        outputs collected first (so nested `(.,.)` grow the code linearly, not exponentially).
        Every generator we generate is consumed in full by its consumer, so collecting first
        changes neither the outputs nor, short of an error, the steps counted."""
        x = self.tmp("x")
        cont = emit(name(x))
        if _size(cont) <= SMALL_CONTINUATION:
            return build(lambda v: [assign(x, v)] + cont)
        out = self.tmp("a")
        return [assign(out, ast.List(elts=[], ctx=ast.Load()))] + \
            build(lambda v: [ast.Expr(value=method(name(out), "append", v))]) + \
            [for_(x, name(out), cont)]

    def g_pipe(self, node, inp, scope, emit):
        return self.each(node[1], inp, scope, self._bound(lambda mid: self.each(node[2], mid, scope, emit)))

    def g_comma(self, node, inp, scope, emit):
        items, stack = [], [node]
        while stack:   # `a, b, c` as one list: one continuation, one tick per comma
            n = stack.pop()
            if n[0] == "comma":
                stack += [n[2], n[1]]
            else:
                items.append(n)
        return self._tick(const(len(items) - 1)) + self._shared(
            emit, lambda e: [stmt for item in items for stmt in self.each(item, inp, scope, e)])

    def g_iter(self, node, inp, scope, emit):
        def over(base):
            items, item = self.tmp("l"), self.tmp("i")
            return [assign(items, _iterated(base))] + \
                self._tick(ast.BinOp(left=call("len", name(items)), op=ast.Add(), right=const(1))) + \
                [for_(item, name(items), emit(name(item)))]
        return self.each(node[1], inp, scope, self._bound(over))

    def g_opt(self, node, inp, scope, emit):
        inner = node[1]
        if inner[0] == "iter":
            def over(base):
                items, item = self.tmp("l"), self.tmp("i")
                return [assign(items, call("_iterate_opt", base)), if_(
                    is_not(name(items), const(None)),
                    self._tick(ast.BinOp(left=call("len", name(items)), op=ast.Add(), right=const(1)))
                    + [for_(item, name(items), emit(name(item)))])]
            return self.each(inner[1], inp, scope, self._bound(over))
        if inner[0] == "index":
            def with_key(k):
                def on(base):
                    t = self.tmp()
                    return [assign(t, call("_index_opt", base, k, name("_MISSING"))),
                            if_(is_not(name(t), name("_MISSING")), emit(name(t)))]
                return self.each(inner[1], inp, scope, self._bound(on))
            return self.each(inner[2], inp, scope, self._bound(with_key))
        raise Unsupported("opt of " + inner[0])

    def g_object(self, node, inp, scope, emit):
        """An object with generator keys or values: every combination, as the closures build it."""
        stmts: list = []
        columns = []
        for k, v in node[1]:
            for part in (k, v):
                out = self.tmp("a")
                stmts.append(assign(out, ast.List(elts=[], ctx=ast.Load())))
                stmts += self.each(part, inp, scope, lambda x, out=out: [
                    ast.Expr(value=method(name(out), "append", x))])
                columns.append(name(out))
        objects, item = self.tmp("l"), self.tmp("i")
        stmts.append(assign(objects, call("_objects", *columns)))
        stmts += self._tick(call("_combinations", *columns[0::2], *columns[1::2]))
        stmts.append(for_(item, name(objects), emit(name(item))))
        return stmts

    def g_call(self, node, inp, scope, emit):
        fname, args = node[1], node[2]
        if (fname, len(args)) == ("empty", 0):
            return []
        if (fname, len(args)) == ("select", 1):
            return self.each(args[0], inp, scope, lambda c: [if_(self.truthy(c), emit(inp))])
        raise Unsupported(f"generator {fname}/{len(args)}")

    def g_try(self, node, inp, scope, emit):
        """`try f`, `f?`, `try f catch g` of a one-output `f`: its value, or on a jq error
        (JqRuntimeError, as the closures catch) nothing, or `g`'s outputs on the error's value.
        Only `f`'s own code is inside the Python `try`: what follows runs outside it, as
        the closures' consumer runs outside theirs; our bails and limits are never caught."""
        body, handler = node[1], node[2]
        if not self.is_one(body):
            raise Unsupported("try of a generator")

        def build(e):
            t = self.tmp()
            guarded: list = []
            v = self.value(body, inp, scope, guarded)
            if self.is_bool(v):
                self.bools.add(t)
            guarded.append(assign(t, v))
            if handler is None:
                caught: list = [ast.Pass()]
                err = None
            else:
                err = self.tmp("e")
                value = self.tmp("v")
                caught = [assign(value, ast.Attribute(value=name(err), attr="value", ctx=ast.Load()))] + \
                    self.each(handler, name(value), scope, e)
            return [ast.Try(body=guarded, handlers=[ast.ExceptHandler(type=name("_JqRuntimeError"), name=err,
                                                                      body=caught or [ast.Pass()])],
                            orelse=e(name(t)), finalbody=[])]
        return self._shared(emit, build) if handler is not None else build(emit)

    def g_as(self, node, inp, scope, emit):
        def body(v):
            var = self.tmp("v")
            return [assign(var, v)] + self.each(node[3], inp, {**scope, node[2]: var}, emit)
        return self.each(node[1], inp, scope, body)

    def g_if(self, node, inp, scope, emit):
        def branch(c, e):
            then = self.each(node[2], inp, scope, e)
            other = self.each(node[3], inp, scope, e) if node[3] is not None else e(inp)
            return [if_(self.truthy(c), then, other)]
        return self._shared(emit, lambda e: self.each(node[1], inp, scope, self._bound(lambda c: branch(c, e))))

    def g_index(self, node, inp, scope, emit):
        def with_key(k):
            return self.each(node[1], inp, scope, self._bound(lambda base: emit(call("_index", base, k))))
        return self.each(node[2], inp, scope, self._bound(with_key))

    def g_alt(self, node, inp, scope, emit):
        def build(e):
            found, item = self.tmp("a"), self.tmp("i")
            stmts = [assign(found, ast.List(elts=[], ctx=ast.Load()))]
            stmts += self.each(node[1], inp, scope,
                               lambda v: [if_(self.truthy(v), [ast.Expr(value=method(name(found), "append", v))])])
            stmts.append(if_(name(found), [for_(item, name(found), e(name(item)))],
                             self.each(node[2], inp, scope, e)))
            return stmts
        return self._shared(emit, build)

    def g_binop(self, node, inp, scope, emit):
        op = node[1]
        fn = _ARITH.get(op) or _COMPARE[op]

        def with_right(b):
            return self.each(node[2], inp, scope, self._bound(lambda a: emit(call(fn, a, b))))
        return self.each(node[3], inp, scope, self._bound(with_right))

    def g_neg(self, node, inp, scope, emit):
        return self.each(node[1], inp, scope, lambda v: emit(call("_negate", v)))

    def _g_logic(self, node, inp, scope, emit, is_and):
        def build(e):
            def with_left(lv):
                right = self.each(node[2], inp, scope, self._bound(lambda rv: e(self.truthy(rv))))
                short = e(const(not is_and))
                return [if_(self.truthy(lv) if is_and else self.falsy(lv), right, short)]
            return self.each(node[1], inp, scope, self._bound(with_left))
        return self._shared(emit, build)

    def g_and(self, node, inp, scope, emit):
        return self._g_logic(node, inp, scope, emit, True)

    def g_or(self, node, inp, scope, emit):
        return self._g_logic(node, inp, scope, emit, False)


def build_function(fn_name: str, args: list[str], body: list, namespace: dict):
    """Compile a function from statements we built; returns the function object."""
    fn = ast.FunctionDef(
        name=fn_name, args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=a) for a in args], vararg=None,
                                         kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[]),
        body=body or [ast.Pass()], decorator_list=[], returns=None, lineno=0)
    module = ast.Module(body=[fn], type_ignores=[])
    ast.fix_missing_locations(module)
    code = compile(module, f"<workloadmap generated {fn_name}>", "exec")
    scope = dict(namespace)
    scope["__builtins__"] = {"len": len, "dict": dict, "float": float, "int": int, "list": list, "str": str, "zip": zip}
    exec(code, scope)  # noqa: S102 - code built from our own AST nodes, never from text
    return scope[fn_name]
