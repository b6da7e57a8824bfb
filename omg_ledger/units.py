"""Money and time conversions shared by every stage.

Money is carried as integer nano-dollars so sums never drift; times as normalized
UTC text plus epoch microseconds.
"""

from __future__ import annotations

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


def nanos_to_usd(nanos: int | None) -> Decimal | None:
    if nanos is None:
        return None
    return Decimal(nanos) / NANOS_PER_USD


def format_usd(nanos: int | None, places: int = 4) -> str:
    if nanos is None:
        return "unknown"
    quantum = Decimal(1).scaleb(-places)
    return "$" + str((Decimal(nanos) / NANOS_PER_USD).quantize(quantum, ROUND_HALF_EVEN))


class BadTimestamp(ValueError):
    pass


def parse_timestamp(text: str) -> tuple[str, int]:
    """Parse an RFC 3339 timestamp (nanosecond precision allowed).

    Returns (normalized UTC text with microseconds, epoch microseconds). Nanoseconds
    beyond the microsecond are truncated: ts is a display clock, never a sort key.
    """
    if not isinstance(text, str) or len(text) < 20 or len(text) > 64:
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
    moment = moment.astimezone(UTC)
    return format_instant(moment), instant_to_us(moment)


def instant_to_us(moment: datetime) -> int:
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def us_to_instant(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)


def format_instant(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
