"""Values in and out of the warehouse: instants and steps as people write them, DuckDB values as JSON.

Why here and not in the command line: every reader of the warehouse (the
`capacity`, `query` and `cost` commands, a notebook, a service embedding the
pipeline) takes times the same way and hands the same JSON on, so one parser
and one converter serve them all.  Errors are ``ValueError``s whose message
says what to write instead; the command line shows them as usage errors.

The time grammar (``parse_instant``): RFC 3339 / ISO 8601 (a date alone is its
midnight, no offset means UTC), ``now``, ``today`` and ``yesterday`` (midnight
UTC), or a time ago: ``30m``, ``12h``, ``7d``, ``2w`` (a leading ``-`` is
allowed: ``-7d`` is also 7 days ago).
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


_AGO = re.compile(r"^-?(\d+(?:\.\d+)?)\s*([mhdw])$")
_DAYS_BACK = {"today": 0, "yesterday": 1}


def parse_instant(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """An instant in UTC from the time grammar above: ``2026-11-03T10:00:00Z``, ``2026-11-03 10:00``,
    ``2026-11-03``, ``now``, ``yesterday``, ``7d``, ``12h`` ... `now` (default: the clock) is what the
    relative forms count from, so that the times of one request agree."""
    word = text.strip().lower()
    ago = _AGO.match(word)
    if word == "now" or word in _DAYS_BACK or ago:
        now = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc)
        if word == "now":
            return now
        if ago:
            try:
                return now - float(ago.group(1)) * _UNITS[ago.group(2)]
            except OverflowError:   # before year 1
                raise ValueError(f"{text.strip()!r} is further back than time goes") from None
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return midnight - dt.timedelta(days=_DAYS_BACK[word])
    try:
        t = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a time (use e.g. 2026-11-03T10:00:00Z, 2026-11-03, now, yesterday, "
                         f"7d or 12h)") from None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).astimezone(dt.timezone.utc)


def parse_step(text: str) -> dt.timedelta:
    """A time series step: ``15m``, ``1h``, ``6h``, ``1d``, ``1w`` (a positive count of one unit)."""
    m = _STEP.match(text.strip().lower())
    if not m or int(m.group(1)) == 0:
        raise ValueError(f"{text!r} is not a step (use e.g. 15m, 1h, 6h, 1d, 1w)")
    try:
        return int(m.group(1)) * _UNITS[m.group(2)]
    except OverflowError:   # past timedelta's 999,999,999 days
        raise ValueError(f"{text!r} is too long a step") from None


def iso(t: dt.datetime, timespec: str = "auto") -> str:
    """An instant in RFC 3339 UTC with a ``Z`` (`timespec` as ``datetime.isoformat`` takes it)."""
    return t.astimezone(dt.timezone.utc).isoformat(timespec=timespec).replace("+00:00", "Z")


def jsonable(value):
    """DuckDB values as JSON-ready values (timestamps in RFC 3339 UTC)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return value.isoformat()
        return iso(value, "milliseconds" if value.microsecond else "seconds")
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
