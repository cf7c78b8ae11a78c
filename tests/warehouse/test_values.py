"""warehouse/values.py: the one time grammar every reader takes, and instants written back as RFC 3339.

Expectations are worked out by hand from a fixed "now" (2026-11-10 12:00 UTC, a Tuesday).
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from workloadmap.warehouse.values import iso, jsonable, parse_instant

UTC = timezone.utc
NOW = datetime(2026, 11, 10, 12, tzinfo=UTC)


@pytest.mark.parametrize("text, expected", [
    ("now", NOW),
    ("7d", datetime(2026, 11, 3, 12, tzinfo=UTC)),           # 7 x 24 h before
    ("-7d", datetime(2026, 11, 3, 12, tzinfo=UTC)),          # the same, written with a minus
    ("12h", datetime(2026, 11, 10, 0, tzinfo=UTC)),
    ("30m", datetime(2026, 11, 10, 11, 30, tzinfo=UTC)),
    ("1.5h", datetime(2026, 11, 10, 10, 30, tzinfo=UTC)),
    ("2w", datetime(2026, 10, 27, 12, tzinfo=UTC)),          # 14 days before
    ("today", datetime(2026, 11, 10, tzinfo=UTC)),           # midnight UTC
    ("yesterday", datetime(2026, 11, 9, tzinfo=UTC)),        # the midnight before
    (" Yesterday ", datetime(2026, 11, 9, tzinfo=UTC)),
    ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),       # a date: its midnight, UTC
    ("2026-11-01 06:30", datetime(2026, 11, 1, 6, 30, tzinfo=UTC)),   # no offset: UTC
    ("2026-11-01T02:00:00+02:00", datetime(2026, 11, 1, tzinfo=UTC)),
    ("2026-11-01T00:00:00Z", datetime(2026, 11, 1, tzinfo=UTC)),
])
def test_every_form_of_the_time_grammar(text, expected):
    got = parse_instant(text, now=NOW)
    assert got == expected and got.tzinfo == UTC


def test_the_relative_forms_count_from_the_clock_when_no_now_is_given():
    before = datetime.now(UTC)
    got = parse_instant("1d")
    after = datetime.now(UTC)
    assert before.timestamp() - 86400 <= got.timestamp() <= after.timestamp() - 86400


@pytest.mark.parametrize("text", ["7x", "tomorrow", "d", "0x7d", "2026-13-01", ""])
def test_what_is_not_a_time_says_what_to_write(text):
    with pytest.raises(ValueError, match="is not a time .*now, yesterday, 7d or 12h"):
        parse_instant(text, now=NOW)


def test_instants_are_written_in_utc_with_a_z():
    t = datetime(2026, 11, 1, 2, 0, 0, 250000, tzinfo=timezone.utc).astimezone()
    assert iso(t) == "2026-11-01T02:00:00.250000Z"
    assert iso(t, "milliseconds") == "2026-11-01T02:00:00.250Z"
    assert jsonable(t) == "2026-11-01T02:00:00.250Z" and jsonable(t.replace(microsecond=0)) == "2026-11-01T02:00:00Z"
