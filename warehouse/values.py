"""Values in and out of the warehouse: instants and steps as people write them, DuckDB values as JSON.

Why here and not in the command line: every reader of the warehouse (the
`capacity`, `query` and `cost` commands, a notebook, a service embedding the
pipeline) takes times the same way and hands the same JSON on, so one parser
and one converter serve them all.  Errors are ``ValueError``s whose message
says what to write instead; the command line shows them as usage errors.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
import uuid

GIB = 2 ** 30

_STEP = re.compile(r"^(\d+)\s*([mhdw])$")
_UNITS = {"m": dt.timedelta(minutes=1), "h": dt.timedelta(hours=1), "d": dt.timedelta(days=1),
          "w": dt.timedelta(weeks=1)}


def parse_instant(text: str) -> dt.datetime:
    """RFC 3339 / ISO 8601 (``2026-11-03T10:00:00Z``, ``2026-11-03 10:00``, ``2026-11-03``); naive means UTC."""
    try:
        t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time (use e.g. 2026-11-03T10:00:00Z or 2026-11-03)") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)


def parse_step(text: str) -> dt.timedelta:
    """A time series step: ``15m``, ``1h``, ``6h``, ``1d``, ``1w`` (a positive count of one unit)."""
    m = _STEP.match(text.strip().lower())
    if not m or int(m.group(1)) == 0:
        raise ValueError(f"{text!r} is not a step (use e.g. 15m, 1h, 6h, 1d, 1w)")
    try:
        return int(m.group(1)) * _UNITS[m.group(2)]
    except OverflowError:   # past timedelta's 999,999,999 days
        raise ValueError(f"{text!r} is too long a step") from None


def jsonable(value):
    """DuckDB values as JSON-ready values (timestamps in RFC 3339 UTC)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return value.isoformat()
        spec = "milliseconds" if value.microsecond else "seconds"
        return value.astimezone(dt.timezone.utc).isoformat(timespec=spec).replace("+00:00", "Z")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def number(value, digits: int = 3):
    """Rounded, and an int when whole (GPU counts read as 64, not 64.0)."""
    if value is None:
        return None
    value = round(float(value), digits)
    return int(value) if value.is_integer() else value
