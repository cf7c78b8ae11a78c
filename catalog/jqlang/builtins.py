"""The jq builtins of the native subset, with jq 1.7 semantics.

A builtin is registered under (name, arity) as a factory
``factory(compiler, compiled_args, arg_nodes) -> fn(input, env)``.  Value
builtins (``length``, ``has(k)``) are written as plain functions of values;
filter builtins (``map(f)``, ``select(f)``) receive compiled closures.
Builtins that loop without bound (range, repeat, recurse, while, until,
walk, paths) are deliberately absent: definitions may not use them.

Why one module of this size: it is a table, one short registration per
builtin of the subset, and auditing the subset means reading that table.
"""

from __future__ import annotations

import json
import math
import re

from . import matching
from .errors import JqRuntimeError
from .evaluating import BUDGET, index, iterate, truthy
from .values import MAX_SIZE, SortKey, compare, jq_add, normalize_number, split_string, tojson, tostring, type_name

BUILTINS: dict = {}
# (name, arity) -> factory(compiler, one_args) -> fn(input, env) -> value, usable when every
# argument has exactly one output (see Compiler.one)
ONE_BUILTINS: dict = {}
# builtins whose generator form always returns a 1-tuple, whatever their arguments
# (name, arity) -> f(input) or f(input, argument): the plain functions behind value0/value1
# builtins, which generated code (generating.py) calls directly
VALUE_FUNCTIONS: dict = {}
ONE_VIA_GEN = {"map", "map_values", "with_entries", "isempty", "any", "all",
               "sort_by", "group_by", "unique_by", "min_by", "max_by"}


def _register(name, arity):
    def deco(factory):
        BUILTINS[(name, arity)] = factory
        return factory
    return deco


def value0(name):
    """A zero-arity builtin computed from the input value alone."""
    def deco(f):
        BUILTINS[(name, 0)] = lambda c, args, nodes: (lambda inp, env: (f(inp),))
        ONE_BUILTINS[(name, 0)] = lambda c, ones: (lambda inp, env: f(inp))
        VALUE_FUNCTIONS[(name, 0)] = f
        return f
    return deco


def value1(name):
    """A one-arity builtin of the input and each output of its argument."""
    def deco(f):
        def factory(c, args, nodes):
            (arg,) = args

            def run(inp, env):
                for a in arg(inp, env):
                    yield f(inp, a)
            return run
        BUILTINS[(name, 1)] = factory

        def one_factory(c, ones):
            (arg,) = ones
            return lambda inp, env: f(inp, arg(inp, env))
        ONE_BUILTINS[(name, 1)] = one_factory
        VALUE_FUNCTIONS[(name, 1)] = f
        return f
    return deco


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# -- generators and control ----------------------------------------------------
BUILTINS[("empty", 0)] = lambda c, a, n: (lambda inp, env: ())


@_register("error", 0)
def _error0(c, args, nodes):
    def run(inp, env):
        raise JqRuntimeError(inp)
    return run


@_register("error", 1)
def _error1(c, args, nodes):
    def run(inp, env):
        for msg in args[0](inp, env):
            raise JqRuntimeError(msg)
        return ()
    return run


@value0("not")
def _not(v):
    return not truthy(v)


@_register("select", 1)
def _select(c, args, nodes):
    (cond,) = args

    def run(inp, env):
        for v in cond(inp, env):
            if v is not None and v is not False:
                yield inp
    return run


@_register("map", 1)
def _map(c, args, nodes):
    (f,) = args

    def run(inp, env):
        budget = env[BUDGET]
        out = []
        for item in iterate(inp):
            budget.tick()
            out.extend(f(item, env))
        return (out,)
    return run


@_register("map_values", 1)
def _map_values(c, args, nodes):
    (f,) = args

    def first_of(item, env):
        for v in f(item, env):
            return (v,)
        return ()

    def run(inp, env):
        env[BUDGET].tick(len(inp) if isinstance(inp, (list, dict)) else 1)
        if isinstance(inp, dict):
            out = {}
            for k, v in inp.items():
                got = first_of(v, env)
                if got:
                    out[k] = got[0]
            return (out,)
        if isinstance(inp, list):
            out = []
            for v in inp:
                out.extend(first_of(v, env))
            return (out,)
        raise JqRuntimeError(f"Cannot iterate over {type_name(inp)}")
    return run


def _first_output(gen):
    for v in gen:
        return True, v
    return False, None


@_register("first", 1)
def _first1(c, args, nodes):
    (f,) = args

    def run(inp, env):
        found, v = _first_output(f(inp, env))
        return (v,) if found else ()
    return run


@_register("last", 1)
def _last1(c, args, nodes):
    (f,) = args

    def run(inp, env):
        found, last = False, None
        for last in f(inp, env):
            found = True
        return (last,) if found else ()
    return run


@_register("isempty", 1)
def _isempty(c, args, nodes):
    (f,) = args
    return lambda inp, env: (not _first_output(f(inp, env))[0],)


@_register("limit", 2)
def _limit(c, args, nodes):
    n_fn, f = args

    def run(inp, env):
        for n in n_fn(inp, env):
            if not _num(n):
                raise JqRuntimeError("Invalid limit: must be a number")
            if n <= 0:
                continue
            count = 0
            for v in f(inp, env):
                yield v
                count += 1
                if count >= n:
                    break
    return run


@_register("nth", 2)
def _nth2(c, args, nodes):
    n_fn, f = args

    def run(inp, env):
        for n in n_fn(inp, env):
            if not _num(n) or n < 0:
                raise JqRuntimeError("Out of bounds negative array index")
            for i, v in enumerate(f(inp, env)):
                if i >= n:
                    yield v
                    break
    return run


def _any_all(is_any):
    def with_gen_cond(gen, cond):
        def run(inp, env):
            for item in gen(inp, env):
                for ok in cond(item, env):
                    if truthy(ok) == is_any:
                        return (is_any,)
            return (not is_any,)
        return run

    def zero(c, args, nodes):
        def run(inp, env):
            items = iterate(inp)
            env[BUDGET].tick(len(items))
            return ((any if is_any else all)(truthy(v) for v in items),)
        return run

    def one(c, args, nodes):
        (cond,) = args
        return with_gen_cond(lambda inp, env: iterate(inp), cond)

    def two(c, args, nodes):
        gen, cond = args
        return with_gen_cond(gen, cond)
    return zero, one, two


for _name, _is_any in (("any", True), ("all", False)):
    _z, _o, _t = _any_all(_is_any)
    BUILTINS[(_name, 0)], BUILTINS[(_name, 1)], BUILTINS[(_name, 2)] = _z, _o, _t


def _by(name, finish):
    """sort_by/group_by/unique_by/min_by/max_by: key = [outputs of f]."""
    def factory(c, args, nodes):
        (f,) = args

        def run(inp, env):
            if not isinstance(inp, list):
                raise JqRuntimeError(f"Cannot index {type_name(inp)} with number" if inp is not None
                                     else f"null (null) cannot be {name.split('_')[0]}ed, as it is not an array")
            env[BUDGET].tick(len(inp) + 1)
            keyed = [(list(f(item, env)), i, item) for i, item in enumerate(inp)]
            keyed.sort(key=lambda t: (SortKey(t[0]), t[1]))
            return (finish(keyed),)
        return run
    BUILTINS[(name, 1)] = factory


def _group(keyed):
    groups, last = [], object()
    for key, _, item in keyed:
        if groups and compare(key, last) == 0:
            groups[-1].append(item)
        else:
            groups.append([item])
            last = key
    return groups


def _unique(keyed):
    out, last, first = [], None, True
    for key, _, item in keyed:
        if first or compare(key, last) != 0:
            out.append(item)
            last, first = key, False
    return out


def _min_by(keyed):
    return keyed[0][2] if keyed else None


def _max_by(keyed):
    if not keyed:
        return None
    best = keyed[-1][0]
    # jq returns the last of equal maxima
    return [t for t in keyed if compare(t[0], best) == 0][-1][2]


_by("sort_by", lambda keyed: [t[2] for t in keyed])
_by("group_by", _group)
_by("unique_by", _unique)
_by("min_by", _min_by)
_by("max_by", _max_by)


@_register("with_entries", 1)
def _with_entries(c, args, nodes):
    (f,) = args

    def run(inp, env):
        entries = to_entries(inp)
        env[BUDGET].tick(len(entries))
        mapped = []
        for e in entries:
            mapped.extend(f(e, env))
        return (from_entries(mapped),)
    return run


@value1("getpath")
def getpath(v, path):
    if not isinstance(path, list):
        raise JqRuntimeError("Path must be specified as an array")
    for key in path:
        if v is None:
            return None
        v = index(v, key)
    return v


@value1("in")
def in_(v, obj):
    return has(obj, v)


@value1("inside")
def inside(v, b):
    return contains(b, v)


# -- value builtins ------------------------------------------------------------
@value0("length")
def length(v):
    if v is None:
        return 0
    if isinstance(v, bool):
        raise JqRuntimeError(f"boolean ({tojson(v)}) has no length")
    if _num(v):
        return normalize_number(abs(v))
    return len(v)


@value0("utf8bytelength")
def utf8bytelength(v):
    if not isinstance(v, str):
        raise JqRuntimeError(f"{type_name(v)} ({tojson(v)[:30]}) only strings have UTF-8 byte length")
    return len(v.encode("utf-8"))


@value0("keys")
def keys(v):
    if isinstance(v, dict):
        return sorted(v)
    if isinstance(v, list):
        return list(range(len(v)))
    raise JqRuntimeError(f"{type_name(v)} ({tojson(v)[:30]}) has no keys")


@value0("keys_unsorted")
def keys_unsorted(v):
    if isinstance(v, dict):
        return list(v)
    return keys(v)


@value1("has")
def has(v, k):
    if v is None and isinstance(k, (str, int, float)) and not isinstance(k, bool):
        return False
    if isinstance(v, dict) and isinstance(k, str):
        return k in v
    if isinstance(v, list) and _num(k):
        return 0 <= k < len(v)
    raise JqRuntimeError(f"Cannot check whether {type_name(v)} has a {type_name(k)} key")


def _contains(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        return all(k in a and _contains(a[k], bv) for k, bv in b.items())
    if isinstance(a, list) and isinstance(b, list):
        return all(any(_contains(x, y) for x in a) for y in b)
    if isinstance(a, str) and isinstance(b, str):
        return b in a
    return compare(a, b) == 0


@value1("contains")
def contains(a, b):
    # only the top level insists on equal kinds; nested mismatches are just false
    if type_name(a) == type_name(b) or (isinstance(a, bool) and isinstance(b, bool)):
        return _contains(a, b)
    raise JqRuntimeError(f"{type_name(a)} ({tojson(a)[:30]}) and {type_name(b)} ({tojson(b)[:30]}) cannot have their containment checked")


@value0("to_entries")
def to_entries(v):
    return [{"key": k, "value": v[k] if isinstance(v, dict) else v[k]} for k in keys_unsorted(v)]


@value0("from_entries")
def from_entries(v):
    out = {}
    for e in iterate(v):
        if not isinstance(e, dict):
            raise JqRuntimeError(f"Cannot index {type_name(e)} with \"key\"")
        k = None
        for name in ("key", "k", "name", "Name", "K", "Key"):
            if truthy(e.get(name)):
                k = e[name]
                break
        else:
            for name in ("key", "k", "name", "Name", "K", "Key"):
                if name in e:
                    k = e[name]
                    break
        if "value" in e:
            val = e["value"]
        elif "v" in e:
            val = e["v"]
        else:
            val = e.get("Value")
        if isinstance(k, str):
            out[k] = val
        elif _num(k) or isinstance(k, bool) or k is None:
            out[tojson(k)] = val
        else:
            raise JqRuntimeError(f"Cannot use {type_name(k)} ({tojson(k)[:30]}) as object key")
    return out


@value0("add")
def add(v):
    acc = None
    for item in iterate(v):
        acc = jq_add(acc, item)
    return acc


@value0("type")
def type_(v):
    return type_name(v)


@value0("tostring")
def tostring_(v):
    return tostring(v)


@value0("tojson")
def tojson_(v):
    return tojson(v)


@value0("fromjson")
def fromjson(v):
    if not isinstance(v, str):
        raise JqRuntimeError(f"{type_name(v)} ({tojson(v)[:30]}) cannot be parsed as JSON")
    try:
        return json.loads(v)
    except (ValueError, RecursionError) as exc:
        raise JqRuntimeError(f"{v[:30]} (while parsing '{v[:30]}'): {exc}") from None


@value0("tonumber")
def tonumber(v):
    if _num(v):
        return v
    if isinstance(v, str):
        text = v.strip()
        try:
            return int(text) if re.fullmatch(r"-?\d+", text) else normalize_number(float(text))
        except ValueError:
            pass
        raise JqRuntimeError(f"Cannot parse '{v[:30]}' as JSON")
    raise JqRuntimeError(f"{type_name(v)} ({tojson(v)[:30]}) cannot be parsed as a number")


def _needs_string(name):
    def check(v):
        if not isinstance(v, str):
            raise JqRuntimeError(f"{name} input must be a string")
        return v
    return check


@value0("ascii_downcase")
def ascii_downcase(v):
    return _needs_string("ascii_downcase")(v).translate(_DOWN)


@value0("ascii_upcase")
def ascii_upcase(v):
    return _needs_string("ascii_upcase")(v).translate(_UP)


_DOWN = {i: i + 32 for i in range(ord("A"), ord("Z") + 1)}
_UP = {i + 32: i for i in range(ord("A"), ord("Z") + 1)}


@value1("startswith")
def startswith(v, s):
    if not isinstance(v, str) or not isinstance(s, str):
        raise JqRuntimeError("startswith() requires string inputs")
    return v.startswith(s)


@value1("endswith")
def endswith(v, s):
    if not isinstance(v, str) or not isinstance(s, str):
        raise JqRuntimeError("endswith() requires string inputs")
    return v.endswith(s)


@value1("ltrimstr")
def ltrimstr(v, s):
    if isinstance(v, str) and isinstance(s, str) and v.startswith(s):
        return v[len(s):]
    return v


@value1("rtrimstr")
def rtrimstr(v, s):
    if isinstance(v, str) and isinstance(s, str) and v.endswith(s) and s:
        return v[: len(v) - len(s)]
    return v


@value0("trim")
def trim(v):
    return _needs_string("trim")(v).strip(" \t\n\r\f\v")


@value0("ltrim")
def ltrim(v):
    return _needs_string("trim")(v).lstrip(" \t\n\r\f\v")


@value0("rtrim")
def rtrim(v):
    return _needs_string("trim")(v).rstrip(" \t\n\r\f\v")


@value1("split")
def split(v, sep):
    if not isinstance(v, str) or not isinstance(sep, str):
        raise JqRuntimeError("split input and separator must be strings")
    return split_string(v, sep)


@value1("join")
def join(v, sep):
    if not isinstance(sep, str):
        raise JqRuntimeError(f"{type_name(sep)} ({tojson(sep)[:30]}) and string cannot be added")
    parts = []
    for item in iterate(v):
        if item is None:
            parts.append("")
        elif isinstance(item, str):
            parts.append(item)
        elif isinstance(item, (bool, int, float)):
            parts.append(tojson(item))
        else:
            raise JqRuntimeError(f"Cannot join with {type_name(item)}")
    out = sep.join(parts)
    if len(out) > MAX_SIZE:
        raise JqRuntimeError("join result too large")
    return out


# -- regular expressions: RE2, linear in the subject (matching.py says why) -----


def _regex_calls(name, arity, per_match=None, outer_flags=False):
    """Register name/arity: pattern (and flags) from their arguments, each output of `per_match`."""
    @_register(name, arity)
    def factory(c, args, nodes):
        def run(inp, env):
            budget = env[BUDGET]
            for pattern, flags in _combinations(args, arity, inp, env, outer_flags):
                for out in per_match(inp, pattern, flags, env):
                    budget.tick()
                    yield out
        return run


def _combinations(args, arity, inp, env, outer_flags):
    if arity == 1:
        for arg in args[0](inp, env):
            yield matching.pattern_and_flags(arg)
    elif outer_flags:
        for flags in args[1](inp, env):
            for pattern in args[0](inp, env):
                yield pattern, flags
    else:
        for pattern in args[0](inp, env):
            for flags in args[1](inp, env):
                yield pattern, flags


def _test_outputs(inp, pattern, flags, env):
    return (matching.test(inp, pattern, flags),)


def _match_outputs(inp, pattern, flags, env):
    return matching.matches(inp, pattern, flags)


def _capture_outputs(inp, pattern, flags, env):
    return [matching.named(m) for m in matching.matches(inp, pattern, flags)]


def _scan_outputs(inp, pattern, flags, env):
    return [matching.scanned(m) for m in matching.matches(inp, pattern, flags, every=True)]


def _splits_outputs(inp, pattern, flags, env):
    return matching.pieces(inp, pattern, flags)


def _split_outputs(inp, pattern, flags, env):
    return (matching.pieces(inp, pattern, flags),)


_regex_calls("test", 2, _test_outputs, outer_flags=True)
value1("test")(lambda v, arg: matching.test(v, *matching.pattern_and_flags(arg)))
for _arity in (1, 2):
    _regex_calls("match", _arity, _match_outputs, outer_flags=True)
    _regex_calls("capture", _arity, _capture_outputs, outer_flags=True)
    _regex_calls("scan", _arity, _scan_outputs)
    _regex_calls("splits", _arity, _splits_outputs)
_regex_calls("split", 2, _split_outputs)


def _test2_one(c, ones):
    re_fn, flags_fn = ones
    return lambda inp, env: matching.test(inp, re_fn(inp, env), flags_fn(inp, env))


ONE_BUILTINS[("test", 2)] = _test2_one


def _sub(every):
    """sub/gsub as jq 1.8 defines them: `s` runs on each match's named captures, and its
    n-th output builds the n-th result."""
    def factory(c, args, nodes):
        re_fn, s_fn = args[0], args[1]
        flags_fn = args[2] if len(args) > 2 else (lambda inp, env: ("",))

        def run(inp, env):
            budget = env[BUDGET]
            for pattern in re_fn(inp, env):
                for flags in flags_fn(inp, env):
                    if every:
                        flags = jq_add(flags, "g")
                    results, previous = [], 0
                    for m in matching.matches(inp, pattern, flags):
                        budget.tick()
                        gap = inp[previous:m["offset"]]
                        for ix, insert in enumerate(s_fn(matching.named(m), env)):
                            piece = jq_add(gap, insert)
                            if ix < len(results):
                                results[ix] = jq_add(results[ix], piece)
                            else:
                                results.append(piece)
                        previous = m["offset"] + m["length"]
                    if not results:
                        yield inp
                    for r in results:
                        yield jq_add(r, inp[previous:])
        return run
    return factory


for _arity in (2, 3):
    BUILTINS[("sub", _arity)] = _sub(False)
    BUILTINS[("gsub", _arity)] = _sub(True)


def _sorted(v):
    if not isinstance(v, list):
        raise JqRuntimeError(f"{type_name(v)} ({tojson(v)[:30]}) cannot be sorted, as it is not an array")
    return sorted(v, key=SortKey)


@value0("sort")
def sort(v):
    return _sorted(v)


@value0("unique")
def unique(v):
    out = []
    for item in _sorted(v):
        if not out or compare(out[-1], item) != 0:
            out.append(item)
    return out


@value0("min")
def min_(v):
    s = _sorted(v)
    return s[0] if s else None


@value0("max")
def max_(v):
    s = _sorted(v)
    return s[-1] if s else None


@value0("reverse")
def reverse(v):
    # libjq 1.8: def reverse: [.[length - 1 - range(0; length)]]
    if length(v) == 0:
        return []
    if isinstance(v, list):
        return v[::-1]
    raise JqRuntimeError(f"Cannot index {type_name(v)} with number")


def _flatten(v, depth):
    if depth < 0:
        raise JqRuntimeError("flatten depth must not be negative")
    out = []
    for item in iterate(v):
        if isinstance(item, list) and depth > 0:
            out.extend(_flatten(item, depth - 1))
        else:
            out.append(item)
    return out


@value0("flatten")
def flatten(v):
    return _flatten(v, 10**9)


@value1("flatten")
def flatten1(v, depth):
    if not _num(depth):
        raise JqRuntimeError("flatten depth must not be negative")
    return _flatten(v, depth)


def _math(name, fn):
    def f(v):
        if not _num(v):
            raise JqRuntimeError(f"{type_name(v)} ({tojson(v)[:30]}) number required")
        try:
            return normalize_number(float(fn(v)))
        except (ValueError, OverflowError):
            return float("nan")
    value0(name)(f)


_math("floor", math.floor)
_math("ceil", math.ceil)
_math("round", lambda v: math.floor(v + 0.5) if v >= 0 else -math.floor(-v + 0.5))
_math("sqrt", math.sqrt)
_math("fabs", math.fabs)
_math("abs", abs)


@value0("first")
def first0(v):
    return index(v, 0)


@value0("last")
def last0(v):
    return index(v, -1)


@value1("nth")
def nth1(v, n):
    return index(v, n)


def _type_filter(name, test):
    def factory(c, args, nodes):
        return lambda inp, env: (inp,) if test(inp) else ()
    BUILTINS[(name, 0)] = factory


_type_filter("values", lambda v: v is not None)
_type_filter("nulls", lambda v: v is None)
_type_filter("booleans", lambda v: isinstance(v, bool))
_type_filter("numbers", _num)
_type_filter("strings", lambda v: isinstance(v, str))
_type_filter("arrays", lambda v: isinstance(v, list))
_type_filter("objects", lambda v: isinstance(v, dict))
_type_filter("iterables", lambda v: isinstance(v, (list, dict)))
_type_filter("scalars", lambda v: not isinstance(v, (list, dict)))


@value0("ascii")
def _ascii(v):
    if not _num(v):
        raise JqRuntimeError("ascii input must be a number")
    return chr(int(v))
