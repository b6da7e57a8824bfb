"""`T` in --since/--until and in a saved query's time parameters.

Relative: a count and a unit, case-sensitive — ``m`` minutes, ``h`` hours, ``d`` days
(24 h), ``w`` weeks, ``mo`` calendar months, ``y`` calendar years — or ``today`` /
``yesterday`` (the start of that day in the zone). Absolute: 2026-11-01,
2026-11-01T08:00 or RFC 3339. An absolute time without an offset is read in the zone
(--tz, else the local zone) under the zone's rules at that date, so a summer date in
winter gets the summer offset.
"""

from __future__ import annotations

import calendar
import os
import re
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import BadArgument
from .units import instant_to_us

# A T must name a date every zone can show: one day inside datetime's own years 1..9999.
_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
_LATEST = datetime(9999, 12, 30, tzinfo=UTC)

_RELATIVE = re.compile(r"^\s*([0-9]+)\s*([A-Za-z]+)\s*$")  # ASCII digits: int() would take "٣"
_FIXED = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}
_CALENDAR = {"mo": 1, "y": 12}  # months per unit
_GRAMMAR = "use 30m, 12h, 7d, 2w, 3mo, 1y, today, yesterday, 2026-11-01, 2026-11-01T08:00 or RFC 3339"
# Units someone might mean, with what this grammar spells them as.
_SUGGEST = {"M": "mo (months) or {n}m (minutes)", "min": "m", "mins": "m", "H": "h", "D": "d", "W": "w",
            "Y": "y", "MO": "mo", "Mo": "mo", "mon": "mo", "month": "mo", "months": "mo", "hr": "h", "hrs": "h",
            "day": "d", "days": "d", "week": "w", "weeks": "w", "year": "y", "years": "y", "s": None}


def local_zone() -> ZoneInfo:
    """The local IANA zone (DST rules included): $TZ, a zone's name or, as the C library
    reads it, the path of a zone file (``TZ=:/usr/share/zoneinfo/Asia/Tokyo``); else
    /etc/localtime; else UTC."""
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        zone = _zone_file(name) if name.startswith("/") else _zone_key(name)
        if zone is not None:
            return zone
    return _zone_file("/etc/localtime") or ZoneInfo("UTC")


def _zone_key(name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: TZ=Europe (a directory), a name too long
        return None


def _zone_file(path: str) -> ZoneInfo | None:
    """The zone in the file at ``path``, by its name where the file is one of a zone
    database's (so a report says Europe/Berlin); None when there is no such file."""
    target = os.path.realpath(path)
    if "/zoneinfo/" in target:
        zone = _zone_key(target.split("/zoneinfo/", 1)[1])
        if zone is not None:
            return zone
    if not os.path.isfile(target):  # (a FIFO would never answer)
        return None
    try:
        with open(target, "rb") as fh:
            return ZoneInfo.from_file(fh, key=os.path.basename(path))
    except (OSError, ValueError):
        return None


def zone_named(name: str | None) -> ZoneInfo:
    """An IANA zone by name, matched case-insensitively; a near miss gets a suggestion."""
    if not name:
        return local_zone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: Europe (a directory), a name too long
        pass
    from zoneinfo import available_timezones

    zones = {zone.lower(): zone for zone in available_timezones()}
    if name.lower() in zones:  # europe/berlin, utc: the case is the only difference
        return ZoneInfo(zones[name.lower()])
    import difflib

    close = difflib.get_close_matches(name.lower(), list(zones), n=1, cutoff=0.6)
    hint = f"did you mean {zones[close[0]]}? " if close else ""
    raise BadArgument(f"unknown time zone {name!r}: {hint}use an IANA name such as Europe/Berlin or UTC")



def _local(moment: datetime, zone: tzinfo | None) -> datetime:
    """A naive wall-clock time made aware under the zone's rules at that very date (a
    ZoneInfo, never a fixed offset: a summer date read in winter gets summer time)."""
    return moment.replace(tzinfo=zone or local_zone())


def _months_back(now: datetime, months: int, zone: tzinfo | None) -> datetime:
    wall = now.astimezone(zone or local_zone())
    index = wall.year * 12 + (wall.month - 1) - months
    year, month = divmod(index, 12)
    day = min(wall.day, calendar.monthrange(year, month + 1)[1])
    naive = wall.replace(tzinfo=None, year=year, month=month + 1, day=day)
    return _local(naive, zone)


def _unit_error(text: str, count: str, unit: str) -> BadArgument:
    hint = _SUGGEST.get(unit, "")
    if unit == "M":
        return BadArgument(f"cannot read time {text!r}: units are case-sensitive; did you mean {count}mo "
                           f"(months) or {count}m (minutes)?")
    if hint:
        return BadArgument(f"cannot read time {text!r}: units are case-sensitive and exact; did you mean "
                           f"{count}{hint}?")
    return BadArgument(f"cannot read time {text!r}: unknown unit {unit!r}; {_GRAMMAR}")


def parse_time(text: str, now: datetime | None = None, zone: tzinfo | None = None) -> datetime:
    """An aware datetime for T. `7d` is exactly 7×24 hours before now; `1mo` the same
    wall-clock time a calendar month before (clamped to the month's last day)."""
    now = now or datetime.now(UTC)
    word = text.strip()
    if word in ("today", "yesterday"):
        wall = now.astimezone(zone or local_zone())
        day = wall.date() - timedelta(days=1 if word == "yesterday" else 0)
        return _local(datetime(day.year, day.month, day.day), zone)
    match = _RELATIVE.match(text)
    if match:
        count, unit = match.group(1), match.group(2)
        try:
            if unit in _FIXED:
                moment = now - int(count) * _FIXED[unit]
            elif unit in _CALENDAR:
                moment = _months_back(now, int(count) * _CALENDAR[unit], zone)
            else:
                raise _unit_error(text, count, unit)
        except (OverflowError, ValueError):
            moment = None
        if moment is None or moment < _EARLIEST:
            raise BadArgument(f"time {text!r} reaches back before the year 1: use a smaller number") from None
        return moment
    candidate = word.replace(" ", "T", 1)
    if candidate.endswith(("Z", "z")):
        candidate = candidate[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(candidate)
    except ValueError:
        raise BadArgument(f"cannot read time {text!r}: {_GRAMMAR}") from None
    if moment.tzinfo is None:
        moment = _local(moment, zone)
    try:
        inside = _EARLIEST <= moment <= _LATEST
    except OverflowError:
        inside = False
    if not inside:
        raise BadArgument(f"time {text!r} is outside 0001-01-02 .. 9999-12-30: use a date between them")
    return moment


def parse_since(text: str | None, now: datetime | None = None, zone: tzinfo | None = None) -> int | None:
    if not text:
        return None
    return instant_to_us(parse_time(text, now, zone))
