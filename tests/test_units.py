"""Money and time conversions: exact, and the timestamp fast path agrees with datetime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omg_ledger.units import BadTimestamp, format_usd, parse_timestamp, usd_to_nanos

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@given(st.integers(0, 8_000_000_000_000_000), st.integers(0, 999))
def test_engine_timestamps_parse_like_datetime(us, ns):
    moment = EPOCH + timedelta(microseconds=us)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + f"{ns:03d}Z"
    assert parse_timestamp(text) == (moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), us)


@pytest.mark.parametrize(("text", "normalized"), [
    ("2026-11-29T18:15:18Z", "2026-11-29T18:15:18.000000Z"),
    ("2026-11-29T18:15:18.8585323Z", "2026-11-29T18:15:18.858532Z"),  # engine trims zeros
    ("2026-11-29T19:15:18.5+01:00", "2026-11-29T18:15:18.500000Z"),
    ("2024-02-29T00:00:00Z", "2024-02-29T00:00:00.000000Z"),
], ids=["no-fraction", "7-digit-fraction", "offset", "leap-day"])
def test_timestamp_shapes(text, normalized):
    assert parse_timestamp(text)[0] == normalized


@pytest.mark.parametrize("text", ["2026-02-30T00:00:00Z", "2025-02-29T00:00:00Z", "2026-11-29T24:00:00Z",
                                  "2026-11-29T18:15:18", "yesterday", ""])
def test_bad_timestamps_are_refused(text):
    with pytest.raises(BadTimestamp):
        parse_timestamp(text)


@pytest.mark.parametrize(("usd", "nanos"), [(0.0456, 45_600_000), (0.1, 100_000_000), (0.066, 66_000_000),
                                            (1e-9, 1), (12, 12_000_000_000)])
def test_dollars_become_exact_nanos(usd, nanos):
    assert usd_to_nanos(usd) == nanos


def test_display_rounds_only_at_the_end():
    assert format_usd(sum(usd_to_nanos(0.1) for _ in range(10))) == "$1.0000"
    assert format_usd(None) == "unknown"
