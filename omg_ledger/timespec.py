"""`T` in --since/--until: relative (30m, 12h, 7d, 2w) or absolute (2026-11-01,
2026-11-01T08:00, RFC 3339). Absolute times without an offset are read in --tz."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo

from .errors import BadArgument
from .units import instant_to_us

# A T must name a date every zone can show: one day inside datetime's own years 1..9999.
_EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
_LATEST = datetime(9999, 12, 30, tzinfo=UTC)

_RELATIVE = re.compile(r"^\s*(\d+)\s*(m|min|h|d|w)\s*$", re.IGNORECASE)
_UNITS = {"m": timedelta(minutes=1), "min": timedelta(minutes=1), "h": timedelta(hours=1),
          "d": timedelta(days=1), "w": timedelta(weeks=1)}


def parse_time(text: str, now: datetime | None = None, zone: tzinfo | None = None) -> datetime:
    """An aware datetime for T. `7d` is exactly 7×24 hours before now."""
    now = now or datetime.now(UTC)
    match = _RELATIVE.match(text)
    if match:
        try:
            moment = now - int(match.group(1)) * _UNITS[match.group(2).lower()]
        except OverflowError:
            moment = None
        if moment is None or moment < _EARLIEST:
            raise BadArgument(f"time {text!r} reaches back before the year 1: use a smaller number") from None
        return moment
    candidate = text.strip().replace(" ", "T", 1)
    if candidate.endswith(("Z", "z")):
        candidate = candidate[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(candidate)
    except ValueError:
        raise BadArgument(
            f"cannot read time {text!r}: use 30m, 12h, 7d, 2w, 2026-11-01, 2026-11-01T08:00 or RFC 3339"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone or datetime.now().astimezone().tzinfo)
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
