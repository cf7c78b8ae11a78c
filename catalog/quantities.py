"""Kubernetes resource quantities ("500m", "64Gi", "1e3") as numbers.

The grammar is apimachinery's: a signed decimal number, then an optional
binary suffix (Ki Mi Gi Ti Pi Ei), decimal suffix (n u m "" k M G T P E) or
decimal exponent (e3, E-2).  Values come back as exact Fractions; parsing is
cached because the same few strings ("1", "8", "64Gi") recur in every object.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


@lru_cache(maxsize=8192)
def _parse_text(text: str) -> Fraction:
    m = _QUANTITY.match(text.strip())
    if not m:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    number, suffix = m.group(1), m.group(2) or ""
    value = Fraction(number)
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * _DECIMAL[suffix]
    exponent = int(suffix[1:])
    if abs(exponent) > 30:
        raise QuantityError(f"{text!r}: exponent out of range")
    return value * Fraction(10) ** exponent


def parse_quantity(value) -> Fraction:
    """A quantity (string or JSON number) as an exact Fraction."""
    if isinstance(value, bool) or value is None:
        raise QuantityError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{value!r} is not a Kubernetes quantity")
        return Fraction(value)
    if isinstance(value, str):
        if len(value) > 64:
            raise QuantityError(f"{value[:20]!r}...: quantity too long")
        return _parse_text(value)
    raise QuantityError(f"{type(value).__name__} is not a Kubernetes quantity")


@lru_cache(maxsize=8192)
def _milli_text(text: str) -> int:
    value = _parse_text(text) * 1000
    return -((-value.numerator) // value.denominator)  # ceiling, like Quantity.MilliValue()


def milli_value(value) -> int:
    """A quantity in thousandths, rounded up as Kubernetes does: '500m' -> 500, '2' -> 2000.

    Integer arithmetic on milli-units is what keeps summing requests cheap.
    """
    if value.__class__ is str and len(value) <= 64:
        return _milli_text(value)
    q = parse_quantity(value) * 1000
    return -((-q.numerator) // q.denominator)


def format_cpu(cores: float) -> str:
    """Cores for people: 0.5 -> '500m', 16 -> '16'."""
    if cores == int(cores):
        return str(int(cores))
    if cores < 1:
        return f"{round(cores * 1000)}m"
    return f"{cores:.3f}".rstrip("0").rstrip(".")


def format_bytes(value: float) -> str:
    """Bytes for people, in the largest binary unit that keeps it exact-ish."""
    for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value >= size:
            amount = value / size
            return f"{amount:.0f}{suffix}" if amount == int(amount) else f"{amount:.1f}{suffix}"
    return str(int(value))
