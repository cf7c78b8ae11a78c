"""jq's value semantics in Python: ordering, arithmetic, text forms.

JSON values are the plain Python ones (dict, list, str, int, float, bool,
None).  jq orders values null < false < true < numbers < strings < arrays <
objects, and objects by their sorted keys first, then values.
"""

from __future__ import annotations

import json
import math

from .errors import JqLimitError, JqRuntimeError

MAX_SIZE = 10_000_000  # characters of a string / items of an array a program may build

_RANK = {type(None): 0, bool: 1, int: 3, float: 3, str: 4, list: 5, dict: 6}


def type_name(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise JqRuntimeError(f"not a JSON value: {type(v).__name__}")


def _rank(v) -> int:
    if v is True:
        return 2
    try:
        return _RANK[v.__class__]
    except KeyError:
        raise JqRuntimeError(f"not a JSON value: {type(v).__name__}") from None


def compare(a, b) -> int:
    ra, rb = _rank(a), _rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra == 3 or ra == 4:
        return (a > b) - (a < b)
    if ra == 5:
        for x, y in zip(a, b):
            c = compare(x, y)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    if ra == 6:
        ka, kb = sorted(a), sorted(b)
        if ka != kb:
            return compare(ka, kb)
        for k in ka:
            c = compare(a[k], b[k])
            if c:
                return c
        return 0
    return 0


class SortKey:
    """Wraps a value so Python's sort uses jq's ordering."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __lt__(self, other):
        return compare(self.v, other.v) < 0

    def __eq__(self, other):
        return compare(self.v, other.v) == 0


def normalize_number(v):
    """Integral floats become ints, as jq prints them (1.0 -> 1)."""
    if v.__class__ is float and v.is_integer() and abs(v) < 2**53:
        return int(v)
    return v


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_size(v):
    if len(v) > MAX_SIZE:
        raise JqLimitError("value exceeded the size bound")
    return v


def jq_add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    if _is_num(a) and _is_num(b):
        return normalize_number(a + b)
    if isinstance(a, str) and isinstance(b, str):
        return _check_size(a + b)
    if isinstance(a, list) and isinstance(b, list):
        return _check_size(a + b)
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        out.update(b)
        return out
    raise JqRuntimeError(f"{type_name(a)} ({tojson(a)[:30]}) and {type_name(b)} ({tojson(b)[:30]}) cannot be added")


def jq_sub(a, b):
    if _is_num(a) and _is_num(b):
        return normalize_number(a - b)
    if isinstance(a, list) and isinstance(b, list):
        return [x for x in a if not any(compare(x, y) == 0 for y in b)]
    raise JqRuntimeError(f"{type_name(a)} ({tojson(a)[:30]}) and {type_name(b)} ({tojson(b)[:30]}) cannot be subtracted")


def _deep_merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        if isinstance(out.get(k), dict) and isinstance(v, dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def jq_mul(a, b):
    if _is_num(a) and _is_num(b):
        return normalize_number(a * b)
    if isinstance(a, str) and _is_num(b) or isinstance(b, str) and _is_num(a):
        s, n = (a, b) if isinstance(a, str) else (b, a)
        if n <= 0:
            return None
        count = math.ceil(n) if n < 1 else int(n)
        if len(s) * count > MAX_SIZE:
            raise JqLimitError("string repetition exceeded the size bound")
        return s * count
    if isinstance(a, dict) and isinstance(b, dict):
        return _deep_merge(a, b)
    raise JqRuntimeError(f"{type_name(a)} ({tojson(a)[:30]}) and {type_name(b)} ({tojson(b)[:30]}) cannot be multiplied")


def jq_div(a, b):
    if _is_num(a) and _is_num(b):
        if b == 0:
            raise JqRuntimeError(f"{type_name(a)} ({tojson(a)}) and {type_name(b)} ({tojson(b)}) cannot be divided because the divisor is zero")
        return normalize_number(a / b)
    if isinstance(a, str) and isinstance(b, str):
        return split_string(a, b)
    raise JqRuntimeError(f"{type_name(a)} ({tojson(a)[:30]}) and {type_name(b)} ({tojson(b)[:30]}) cannot be divided")


def jq_mod(a, b):
    if _is_num(a) and _is_num(b):
        if math.isnan(a) or math.isnan(b):
            return float("nan")
        ia, ib = int(a), int(b)
        if ib == 0:
            raise JqRuntimeError(f"{type_name(a)} ({tojson(a)}) and {type_name(b)} ({tojson(b)}) cannot be divided because the divisor is zero")
        r = abs(ia) % abs(ib)
        return -r if ia < 0 else r
    raise JqRuntimeError(f"{type_name(a)} ({tojson(a)[:30]}) and {type_name(b)} ({tojson(b)[:30]}) cannot be divided")


def split_string(s: str, sep: str) -> list:
    if s == "":
        return []
    if sep == "":
        return list(s)
    return s.split(sep)


def _default(v):
    raise JqRuntimeError(f"not a JSON value: {type(v).__name__}")


def tojson(v) -> str:
    """Compact JSON, as jq prints it (numbers read from input keep their form)."""
    try:
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False, default=_default)
    except RecursionError:
        raise JqLimitError("value nested too deeply") from None


def tostring(v) -> str:
    return v if isinstance(v, str) else tojson(v)
