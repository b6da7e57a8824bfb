"""Estimates for unpriced work (``--estimate``): the charges whose cost is NULL, priced
from their tokens with the price book. Never added to known spend, never stored.

Each figure is kept apart: ``estimated_nano_usd`` (the sum of the estimates),
``estimated_invocations`` (unpriced charges that had tokens and a price) and
``unestimated_invocations`` (unpriced charges with no tokens, or whose runtime has no
price), with the reasons counted in ``unestimated_reasons``.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import and_, select

from .. import schema
from ..prices import NO_PRICE, NO_TOKENS, PriceBook, estimate, why_not

ESTIMATE_FIELDS = ("estimated_nano_usd", "estimated_invocations", "unestimated_invocations")


def unpriced_charges(conditions: list):
    """Every charge with no known cost matching `conditions` (on charges/runs/homes),
    with what keys, prices and periods need."""
    c, r, h = schema.charges.c, schema.runs.c, schema.homes.c
    query = (select(c.run_pk, c.at_us, c.node_id, c.kind.label("charge_kind"), c.leg_kind, r.runtime,
                    r.snapshot_schema.is_(None).label("no_snapshot"), r.graph_name.label("graph"), r.run_id,
                    r.goal_first_run_id.label("goal"), h.label.label("home"), c.input_tokens,
                    c.cached_input_tokens, c.output_tokens, c.reasoning_output_tokens)
             .select_from(schema.charges.join(schema.runs, r.id == c.run_pk).join(schema.homes, h.id == r.home_id))
             .where(and_(c.cost_nano_usd.is_(None), *conditions)))
    return query


def zero() -> dict:
    return {**dict.fromkeys(ESTIMATE_FIELDS, 0), "unestimated_reasons": {NO_TOKENS: 0, NO_PRICE: 0}}


def add(into: dict, book: PriceBook, charge: Mapping) -> None:
    """Add one unpriced charge's estimate (or its reason for having none) to `into`."""
    nanos = estimate(book, charge)
    if nanos is None:
        into["unestimated_invocations"] += 1
        reason = why_not(book, charge)
        into["unestimated_reasons"][reason] = into["unestimated_reasons"].get(reason, 0) + 1
    else:
        into["estimated_nano_usd"] += nanos
        into["estimated_invocations"] += 1



def with_usd(totals: dict) -> dict:
    """Estimate totals with ``estimated_usd`` beside the exact nano-dollars (for display)."""
    totals["estimated_usd"] = round(totals["estimated_nano_usd"] / 1e9, 9)
    return totals


def by_run(engine, book: PriceBook) -> dict[tuple[str, str], dict]:
    """The estimate of every run with unpriced charges, keyed (home label, run id); a run
    that is not a key has none: ``with_usd(zero())``."""
    out: dict[tuple[str, str], dict] = {}
    with engine.connect() as conn:
        for row in conn.execute(unpriced_charges([])):
            m = row._mapping
            add(out.setdefault((m["home"], m["run_id"]), zero()), book, m)
    return {key: with_usd(totals) for key, totals in out.items()}


def annotate_run(detail: dict, book: PriceBook) -> dict:
    """`show --estimate`: each unpriced charge gets `estimated_nano_usd` (None when it has
    no tokens or no price, with `estimate_unavailable` saying which), the run the totals."""
    totals = zero()
    for charge in detail["charges"]:
        if charge["cost_nano_usd"] is not None:
            continue
        facts = {**charge, "runtime": detail["runtime"], "graph": detail["graph"]}
        nanos = estimate(book, facts)
        charge["estimated_nano_usd"] = nanos
        charge["estimated_usd"] = None if nanos is None else round(nanos / 1e9, 9)
        charge["estimate_unavailable"] = why_not(book, facts)
        add(totals, book, facts)
    detail.update(with_usd(totals))
    detail["price_book"] = book.describe()
    return detail
