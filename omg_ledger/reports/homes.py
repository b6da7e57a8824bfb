"""The homes a ledger indexes: list, rename, forget."""

from __future__ import annotations

import os

from sqlalchemy import case, func, select
from sqlalchemy.engine import Engine

from .. import schema
from ..db import write_transaction
from ..errors import BadArgument


def list_homes(engine: Engine) -> list[dict]:
    """Every home with its run counts and ``runs_dir``: the directory its present runs
    were read in (``<path>/runs``, or where a symlinked runs/ leads), None when it has
    none or they were read in several places."""
    homes, runs = schema.homes, schema.runs
    present_dir = case((runs.c.gone, None), else_=runs.c.dir_path)
    query = (
        select(homes.c.label, homes.c.path, homes.c.real_path, homes.c.machine, homes.c.last_synced_at,
               func.count(runs.c.id).label("runs"),
               func.coalesce(func.sum(case((runs.c.gone, 1), else_=0)), 0).label("gone"),
               func.coalesce(func.sum(case((runs.c.billed, 0), else_=1)), 0).label("copies_elsewhere"),
               func.min(present_dir).label("first_dir"), func.max(present_dir).label("last_dir"))
        .select_from(homes.outerjoin(runs, runs.c.home_id == homes.c.id))
        .group_by(homes.c.id, homes.c.label, homes.c.path, homes.c.real_path, homes.c.machine,
                  homes.c.last_synced_at)
        .order_by(homes.c.label))
    out = []
    with engine.connect() as conn:
        for row in conn.execute(query):
            item = {k: v for k, v in row._mapping.items() if k not in ("first_dir", "last_dir")}
            out.append({**item, "runs": int(row.runs), "gone": int(row.gone),
                        "copies_elsewhere": int(row.copies_elsewhere),
                        "runs_dir": _common_parent(row.first_dir, row.last_dir)})
    return out


def _common_parent(first: str | None, last: str | None) -> str | None:
    """The parent of the least and greatest run directory paths, when it is the same.
    A run directory's name holds no '/', so every path sorting between two paths of one
    parent has that parent too: the two ends decide for all."""
    if first is None or last is None:
        return None
    parent = os.path.dirname(first)
    return parent if os.path.dirname(last) == parent else None


def rename_home(engine: Engine, old: str, new: str) -> None:
    homes = schema.homes
    with write_transaction(engine) as conn:
        if conn.execute(select(homes.c.id).where(homes.c.label == new)).first() is not None:
            raise BadArgument(f"a home is already labelled {new!r} (omg-ledger homes lists them)")
        if conn.execute(homes.update().where(homes.c.label == old).values(label=new)).rowcount != 1:
            raise BadArgument(f"no home is labelled {old!r} (omg-ledger homes lists them)")


def forget_home(engine: Engine, label: str) -> int:
    """Remove a home and every run of it from the ledger; returns how many runs went."""
    homes, runs = schema.homes, schema.runs
    with write_transaction(engine) as conn:
        home_id = conn.execute(select(homes.c.id).where(homes.c.label == label)).scalar()
        if home_id is None:
            raise BadArgument(f"no home is labelled {label!r} (omg-ledger homes lists them)")
        identities = list(conn.execute(select(runs.c.stream_identity).where(runs.c.home_id == home_id)).scalars())
        count = conn.execute(select(func.count()).select_from(runs).where(runs.c.home_id == home_id)).scalar()
        conn.execute(schema.problems.update().where(schema.problems.c.run_pk.in_(
            select(runs.c.id).where(runs.c.home_id == home_id))).values(run_pk=None))
        conn.execute(schema.plans.delete().where(schema.plans.c.home_id == home_id))
        conn.execute(runs.delete().where(runs.c.home_id == home_id))
        conn.execute(homes.delete().where(homes.c.id == home_id))
        from ..store import settle_copies

        settle_copies(conn, identities)  # a copy in another home may now be the billed one
    return int(count)
