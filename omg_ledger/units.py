"""Money and time conversions shared by every stage.

Money is carried as integer nano-dollars so sums never drift; times as normalized
UTC text plus epoch microseconds.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

NANOS_PER_USD = 1_000_000_000


def usd_to_nanos(value: float | int) -> int:
    """Convert a JSON number of dollars to exact integer nano-dollars.

    ``repr`` of a float is the shortest text that round-trips, i.e. the digits the
    engine wrote, so going through Decimal(repr) recovers 0.0456 exactly rather than
    0.045599999999999995.
    """
    return int((Decimal(repr(value)) * NANOS_PER_USD).to_integral_value(ROUND_HALF_EVEN))


def summed(value: int | None) -> int:
    """An SQL SUM (or COUNT) of an integer column as an int, NULL as 0. SQLite sums a
    value that is not an integer (text or a real typed into the ledger by hand) as a
    float, text as 0: such a sum is refused, never rounded into a total (ValueError,
    which the CLI turns into an error naming the value)."""
    if type(value) is float:
        raise ValueError(f"a sum of an integer column came back as {value!r}")
    return int(value or 0)


def nanos_to_usd(nanos: int | None) -> Decimal | None:
    if nanos is None:
        return None
    return Decimal(nanos) / NANOS_PER_USD


def format_usd(nanos: int | None, places: int = 4) -> str:
    if nanos is None:
        return "unknown"
    quantum = Decimal(1).scaleb(-places)
    # "f" never writes 0E-8; "," groups thousands, as every table and line shows money.
    return "$" + format((Decimal(nanos) / NANOS_PER_USD).quantize(quantum, ROUND_HALF_EVEN), ",f")


def places_showing_above(limit: int, amounts: list[int], places: int = 4) -> int:
    """The decimals at which ``amounts``, each rounded as format_usd shows it, still add up
    to more than ``limit`` shown alike: ``places``, or more where rounding would make
    figures over a limit read level with it (at 9 they are exact nano-dollars)."""
    def shown(nanos: int, at: int) -> Decimal:
        return (Decimal(nanos) / NANOS_PER_USD).quantize(Decimal(1).scaleb(-at), ROUND_HALF_EVEN)

    for at in range(places, 9):
        if sum(shown(n, at) for n in amounts) > shown(limit, at):
            return at
    return 9


class BadTimestamp(ValueError):
    pass


# The instants the ledger accepts: [1970-01-01T00:00:00Z, 9999-01-01T00:00:00Z). Outside
# them a timestamp is damage, not a clock reading. The bounds keep every derived date
# representable: a UTC instant in the range stays within years 1969..9999 in any zone
# (offsets are within ±26 h), so the day, the Monday of its week and the first of the
# next month always exist; and no instant is negative, so integer division buckets
# by floor on every database (SQLite and PostgreSQL truncate toward zero).
MIN_INSTANT_US = 0
MAX_INSTANT_US = 253_370_764_800_000_000  # 9999-01-01T00:00:00Z, exclusive
INSTANT_RANGE = "1970-01-01T00:00:00Z to 9998-12-31T23:59:59.999999Z"


def instant_in_range(us: int) -> bool:
    return MIN_INSTANT_US <= us < MAX_INSTANT_US


_ENGINE_TS = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z\Z")
# The same shape in ASCII digits only (\d above also takes other scripts' digits).
_ASCII_ENGINE_TS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?Z\Z")
# RFC 3339 section 5.6 ``date-time``: full date, "T" (or "t"; the RFC also allows a
# space), full time with seconds, optional fraction, and a *mandatory* offset. ASCII
# digits only (``\d`` would accept other Unicode digits). Python's fromisoformat alone
# also takes any character as the separator (a NUL included), ISO 8601 week dates,
# basic format and hour-only offsets.
RFC3339_DATE_TIME = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})"
    r"[Tt ]"
    r"(?P<time>[0-9]{2}:[0-9]{2}:[0-9]{2})"
    r"(?:\.(?P<frac>[0-9]+))?"
    r"(?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})"
)
# The last second the fast path converted ("YYYY-MM-DDTHH:MM:SS") and its epoch
# microseconds: a stream's lines come in bursts, and one entry is all the memory this
# takes.
_last_second: tuple[str, int] = ("", 0)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar (H. Hinnant's algorithm)."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def parse_timestamp(text: str, *, strict: bool = True) -> tuple[str, int]:
    """Parse an RFC 3339 timestamp (nanosecond precision allowed).

    Returns (normalized UTC text with microseconds, epoch microseconds). Nanoseconds
    beyond the microsecond are truncated: ts is a display clock, never a sort key.
    Only RFC 3339's shape is taken (date, 'T' or a space, time, 'Z' or ±hh:mm), and an
    instant outside INSTANT_RANGE is refused, unless ``strict`` is false: re-reading
    what an older omg-ledger already stored, which took any separator and ISO 8601's
    other spellings, and no range.
    """
    global _last_second
    if type(text) is str and _ASCII_ENGINE_TS.match(text) is not None:
        # The engine's shape in ASCII digits, by slicing (its own function would cost a
        # call a line); an impossible date or time goes on to the general path.
        second_text = text[:19]
        if second_text == _last_second[0]:
            base = _last_second[1]
        else:
            year, month, day = int(text[:4]), int(text[5:7]), int(text[8:10])
            hour, minute, second = int(text[11:13]), int(text[14:16]), int(text[17:19])
            if 1 <= month <= 12 and 1 <= day <= _month_days(year, month) and hour < 24 and minute < 60 \
                    and second < 60:
                base = (_days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60
                        + second) * 1_000_000
                _last_second = (second_text, base)
            else:
                base = None
        if base is not None:
            if len(text) >= 27:  # six fraction digits or more: the rest is cut
                at_us = base + int(text[20:26])
                normalized = text[:26] + "Z"
            else:
                micros = int(text[20:-1].ljust(6, "0"))  # "" without a fraction
                at_us = base + micros
                normalized = f"{second_text}.{micros:06d}Z"
            if strict and not MIN_INSTANT_US <= at_us < MAX_INSTANT_US:
                raise BadTimestamp(f"timestamp {text!r} is outside the range this ledger accepts ({INSTANT_RANGE})")
            return normalized, at_us
    return _parse_timestamp_general(text, strict)


def _parse_timestamp_general(text: str, strict: bool) -> tuple[str, int]:
    match = _ENGINE_TS.match(text) if isinstance(text, str) else None
    if match is not None:
        # The engine's shape in digits of other scripts, which the ASCII fast path above
        # does not take: what this path has always made of them.
        y, mo, d, h, mi, s, frac = match.groups()
        year, month, day, hour, minute, second = int(y), int(mo), int(d), int(h), int(mi), int(s)
        if 1 <= month <= 12 and 1 <= day <= _month_days(year, month) and hour < 24 and minute < 60 and second < 60:
            micros = int((frac or "").ljust(6, "0")[:6])
            epoch = (_days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second) * 1_000_000
            if strict and not instant_in_range(epoch + micros):
                raise BadTimestamp(f"timestamp {text!r} is outside the range this ledger accepts ({INSTANT_RANGE})")
            return f"{y}-{mo}-{d}T{h}:{mi}:{s}.{micros:06d}Z", epoch + micros
    if not isinstance(text, str) or len(text) < 20 or len(text) > 64 \
            or (strict and RFC3339_DATE_TIME.fullmatch(text) is None):
        raise BadTimestamp(f"not an RFC 3339 timestamp: {text!r}")
    s = text.strip()
    if s[-1] in "zZ":
        s = s[:-1] + "+00:00"
    # Python's fromisoformat takes at most 6 fractional digits: cut the rest.
    dot = s.find(".", 19)
    if dot != -1:
        end = dot + 1
        while end < len(s) and s[end].isdigit():
            end += 1
        s = s[: dot + 1] + s[dot + 1 : min(end, dot + 7)].ljust(6, "0") + s[end:]
    try:
        moment = datetime.fromisoformat(s)
    except ValueError as exc:
        raise BadTimestamp(f"not an RFC 3339 timestamp: {text!r}") from exc
    if moment.tzinfo is None:
        raise BadTimestamp(f"timestamp has no UTC offset: {text!r}")
    # Subtracting aware datetimes never overflows (converting 0001-01-01T00:00+14:00 to
    # UTC would): check the range on the number first.
    us = instant_to_us(moment)
    if not instant_in_range(us):
        if strict:
            raise BadTimestamp(f"timestamp {text!r} is outside the range this ledger accepts ({INSTANT_RANGE})")
        try:
            return format_instant(moment), us
        except (OverflowError, ValueError) as exc:
            raise BadTimestamp(f"timestamp {text!r} has no UTC date") from exc
    return format_instant(us_to_instant(us)), us


def _month_days(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def instant_to_us(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def us_to_instant(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)


def format_instant(moment: datetime) -> str:
    """An instant as the ledger's UTC text, which is compared with stored times as text:
    the year always has four digits, so the text orders as the instant (strftime writes
    999 for the year 0999, which sorts after 2026)."""
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
