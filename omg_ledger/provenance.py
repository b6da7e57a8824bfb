"""How a PASS verdict was reached (the engine's `provenance`), and the `runs` columns
that count each run's PASS nodes by it: written by derivation (reconcile), read by
`audit`. A module of its own so audit's start-up does not import derivation."""

from __future__ import annotations

PROVENANCES = ("verified", "approved", "self-reported", "exit-only")  # strongest first

# Provenance → its count's column; '' is the key of an absent or empty provenance.
PASS_COUNT_COLUMNS = {
    **{name: f"passes_{name.replace('-', '_')}" for name in PROVENANCES},
    "": "passes_unknown",
}
PASS_COUNT_COLUMNS_ALL = ("passes", *PASS_COUNT_COLUMNS.values())
