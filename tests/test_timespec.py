"""The time grammar of --since/--until and of a saved query's time parameters."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from omg_ledger.errors import BadArgument
from omg_ledger.reports.sql import typed_value
from omg_ledger.timespec import parse_time

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")

GOOD = [
    ("minutes", "30m", datetime(2026, 12, 1, 9, 0, tzinfo=UTC)),
    ("hours", "12h", datetime(2026, 11, 30, 21, 30, tzinfo=UTC)),
    ("days are 24 h", "7d", datetime(2026, 11, 24, 9, 30, tzinfo=UTC)),
    ("weeks", "2w", datetime(2026, 11, 17, 9, 30, tzinfo=UTC)),
    # 10:30 in Berlin (CET) on Dec 1 -> 10:30 CEST on Sep 1 = 08:30 UTC
    ("calendar months keep the wall clock", "3mo", datetime(2026, 9, 1, 8, 30, tzinfo=UTC)),
    ("years", "1y", datetime(2025, 12, 1, 9, 30, tzinfo=UTC)),
    ("today starts at local midnight", "today", datetime(2026, 11, 30, 23, 0, tzinfo=UTC)),
    ("yesterday", "yesterday", datetime(2026, 11, 29, 23, 0, tzinfo=UTC)),
    # a summer date read in winter: Berlin's summer offset (+02:00) at that date
    ("a date without offset uses the zone's rules at that date", "2026-07-01", datetime(2026, 6, 30, 22, 0, tzinfo=UTC)),
    ("a winter date", "2026-01-15T08:00", datetime(2026, 1, 15, 7, 0, tzinfo=UTC)),
    ("RFC 3339 with an offset is that instant", "2026-07-01T00:00:00-05:00", datetime(2026, 7, 1, 5, 0, tzinfo=UTC)),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in GOOD], ids=[c[0] for c in GOOD])
def test_grammar(text, expected):
    assert parse_time(text, NOW, BERLIN) == expected


def test_month_back_is_clamped_to_the_months_last_day():
    assert parse_time("1mo", datetime(2026, 3, 31, 12, tzinfo=UTC), ZoneInfo("UTC")) == datetime(2026, 2, 28, 12,
                                                                                               tzinfo=UTC)


def test_local_zone_rules_apply_at_the_date(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    assert parse_time("2026-07-01", NOW) == datetime(2026, 7, 1, 4, 0, tzinfo=UTC)  # EDT, not today's EST
    assert parse_time("2026-01-01", NOW) == datetime(2026, 1, 1, 5, 0, tzinfo=UTC)


BAD = [
    ("3M", ["3mo", "3m"]),
    ("2D", ["2d"]),
    ("5min", ["5m"]),
    ("4H", ["4h"]),
    ("7days", ["7d"]),
    ("3x", ["unknown unit"]),
    ("next tuesday", ["cannot read time"]),
    # int() reads other scripts' digits; a count here is ASCII digits only
    ("\u0663d", ["cannot read time"]),
    ("\uff17d", ["cannot read time"]),
]


@pytest.mark.parametrize(("text", "says"), BAD, ids=[b[0] for b in BAD])
def test_units_are_case_sensitive_and_complete(text, says):
    with pytest.raises(BadArgument) as caught:
        parse_time(text, NOW, BERLIN)
    assert all(word in str(caught.value) for word in says), str(caught.value)
    assert "\n" not in str(caught.value)


def test_query_params_are_typed():
    assert typed_value("since", "2026-11-01T00:00:00+01:00", NOW, BERLIN) == "2026-10-31T23:00:00.000000Z"
    assert typed_value("until", "7d", NOW, BERLIN) == "2026-11-24T09:30:00.000000Z"
    assert typed_value("limit", "20") == 20
    assert typed_value("since", "") == ""  # no bound
    assert typed_value("graph", "3M") == "3M"  # text stays text
    for name, value in (("limit", "abc"), ("limit", "-1"), ("since", "3M")):
        with pytest.raises(BadArgument) as caught:
            typed_value(name, value, NOW, BERLIN)
        assert f"--param {name}" in str(caught.value)


def test_a_zone_name_naming_a_directory_or_too_long_is_a_usage_error(tmp_path, corpus_home):
    """`--tz Europe` (a directory of the zone database) and a name longer than a file
    name can be were an IsADirectoryError / OSError traceback, not an unknown zone."""
    import os
    import subprocess
    import sys

    from tests.cli_checks import one_line_error
    from tests.test_cost import ledger

    db = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    ledger(db, corpus_home, "corpus")
    for zone in ("Europe", "x" * 300):
        result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "cost", "--by", "day", "--db", db,
                                 "--tz", zone], capture_output=True, text=True, timeout=120)
        assert "unknown time zone" in one_line_error(result, 2)
    # The same in $TZ is a local zone that cannot be read: the next source is used, as for TZ=garbage.
    for zone in ("Europe", "x" * 300):
        result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "cost", "--by", "day", "--db", db],
                                capture_output=True, text=True, timeout=120, env={**os.environ, "TZ": zone})
        assert result.returncode == 0 and result.stderr == "", result.stderr


def test_a_tz_that_is_the_path_of_a_zone_file_is_that_zone(monkeypatch, tmp_path):
    """TZ=/usr/share/zoneinfo/Asia/Tokyo (or with the C library's leading ':') is the local
    zone the C library and `date` use; it was ignored for /etc/localtime, so periods and
    `today` were cut in another zone. A zone file outside a zone database counts too."""
    import importlib.resources
    import shutil

    from omg_ledger.timespec import local_zone

    in_database = importlib.resources.files("tzdata") / "zoneinfo" / "Pacific" / "Kiritimati"
    elsewhere = tmp_path / "kiritimati"
    shutil.copyfile(str(in_database), elsewhere)
    # 09:30Z on Dec 1 is 23:30 on Dec 1 in Kiritimati (+14), whose day began at 10:00Z on Nov 30.
    start_of_today = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
    for value, key in ((str(in_database), "Pacific/Kiritimati"), (f":{in_database}", "Pacific/Kiritimati"),
                       (str(elsewhere), "kiritimati")):
        monkeypatch.setenv("TZ", value)
        assert local_zone().key == key, value
        assert parse_time("today", NOW) == start_of_today, value
        assert local_zone().utcoffset(datetime(2026, 12, 1)).total_seconds() == 14 * 3600
