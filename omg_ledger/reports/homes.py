"""The homes a ledger indexes: list, rename, forget."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..backend import backend_of, reading
from ..config import check_label
from ..errors import BadArgument

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

# A home with no run joins as one row of NULL runs columns: 0 runs, none gone, and none
# billed elsewhere (a copy is counted only where there is a run, r.id not NULL).
_HOMES_SQL = (
    "SELECT h.label, h.path, h.real_path, h.machine, h.last_synced_at, COUNT(r.id) AS runs, "
    "COALESCE(SUM(CASE WHEN r.gone THEN 1 ELSE 0 END), 0) AS gone, "
    "COALESCE(SUM(CASE WHEN r.id IS NOT NULL AND NOT r.billed THEN 1 ELSE 0 END), 0) AS copies_elsewhere, "
    "MIN(CASE WHEN r.gone THEN NULL ELSE r.dir_path END) AS first_dir, "
    "MAX(CASE WHEN r.gone THEN NULL ELSE r.dir_path END) AS last_dir "
    "FROM homes h LEFT OUTER JOIN runs r ON r.home_id = h.id "
    "GROUP BY h.id, h.label, h.path, h.real_path, h.machine, h.last_synced_at ORDER BY h.label")


def list_homes(engine: Engine) -> list[dict]:
    """Every home with its run counts and ``runs_dir``: the directory its present runs
    were read in (``<path>/runs``, or where a symlinked runs/ leads), None when it has
    none or they were read in several places. Read through the DB-API, like `runs`."""
    out = []
    with reading(engine) as reader:
        for row in reader.dicts(_HOMES_SQL):
            first, last = row.pop("first_dir"), row.pop("last_dir")
            out.append({**row, "runs": int(row["runs"]), "gone": int(row["gone"]),
                        "copies_elsewhere": int(row["copies_elsewhere"]), "runs_dir": _common_parent(first, last)})
    return out


def _common_parent(first: str | None, last: str | None) -> str | None:
    """The parent of the least and greatest run directory paths, when it is the same.
    A run directory's name holds no '/', so every path sorting between two paths of one
    parent has that parent too: the two ends decide for all."""
    if first is None or last is None:
        return None
    parent = os.path.dirname(first)
    return parent if os.path.dirname(last) == parent else None


def home_labels_of(engine: Engine, given: Iterable[str]) -> tuple[str, ...]:
    """The labels ``--home`` names on a reading command: each a home's label, or the
    directory of a home (the path it was synced as, or where its symlinks lead): this
    machine's home there, or where this machine has none (a host that only reads the
    ledger), every machine's. One that is neither is a usage error naming the labels
    there are: a filter that matched no home would print an empty table, or $0, as if
    that were the answer."""
    from ..tail import machine_source

    given = tuple(given)
    if not given:
        return ()
    with reading(engine) as reader:
        homes = list(reader.rows("SELECT label, path, real_path, machine FROM homes ORDER BY label"))
    labels = {label for label, _, _, _ in homes}
    here = machine_source()
    out = []
    for name in given:
        if name in labels:
            out.append(name)
            continue
        where = os.path.realpath(os.path.expanduser(name))
        at = [(label, machine) for label, path, real_path, machine in homes if where in (path, real_path)]
        # Another machine's home at the same path is another directory.
        named = [label for label, machine in at if machine == here] or [label for label, _ in at]
        if not named:
            known = ", ".join(repr(label) for label in sorted(labels)) or "none yet"
            raise BadArgument(f"--home {name!r} is no home of this ledger: give a label or a home's directory "
                              f"(its homes: {known}; `omg-ledger homes` lists them)")
        out.extend(named)
    return tuple(dict.fromkeys(out))


def rename_home(engine: Engine, old: str, new: str) -> None:
    from sqlalchemy import select

    from .. import schema
    from ..db import write_transaction

    check_label(new)  # a label sync can name again
    homes = schema.homes
    with write_transaction(engine) as conn:
        if conn.execute(select(homes.c.id).where(homes.c.label == new)).first() is not None:
            raise BadArgument(f"a home is already labelled {new!r} (omg-ledger homes lists them)")
        if conn.execute(homes.update().where(homes.c.label == old).values(label=new)).rowcount != 1:
            raise BadArgument(f"no home is labelled {old!r} (omg-ledger homes lists them)")
    backend_of(engine).settle_file(engine)


def home_labelled(engine: Engine, label: str) -> dict:
    """The ``homes`` row of the home labelled ``label`` (what `homes forget` would remove)."""
    home = next((h for h in list_homes(engine) if h["label"] == label), None)
    if home is None:
        raise BadArgument(f"no home is labelled {label!r} (omg-ledger homes lists them)")
    return home


def forget_home(engine: Engine, label: str) -> int:
    """Remove a home and every run of it from the ledger; returns how many runs went."""
    from datetime import UTC, datetime

    from sqlalchemy import func, select

    from .. import schema
    from ..db import write_transaction
    from ..store import resolve_problems, resolve_runs_problems
    from ..units import format_instant

    homes, runs = schema.homes, schema.runs
    with write_transaction(engine) as conn:
        home = conn.execute(select(homes.c.id, homes.c.path, homes.c.real_path, homes.c.machine).where(
            homes.c.label == label)).first()
        if home is None:
            raise BadArgument(f"no home is labelled {label!r} (omg-ledger homes lists them)")
        home_id = home.id
        # No sync will read this home again to resolve its problems: they end here, kept
        # as history, so audit does not need attention for ever.
        now = format_instant(datetime.now(UTC))
        resolve_runs_problems(conn, select(runs.c.id).where(runs.c.home_id == home_id), now)
        for directory in {home.path, home.real_path} - {None}:
            resolve_problems(conn, [], [], now, home.machine or "", under=directory)
        identities = list(conn.execute(select(runs.c.stream_identity).where(runs.c.home_id == home_id)).scalars())
        count = conn.execute(select(func.count()).select_from(runs).where(runs.c.home_id == home_id)).scalar()
        conn.execute(schema.problems.update().where(schema.problems.c.run_pk.in_(
            select(runs.c.id).where(runs.c.home_id == home_id))).values(run_pk=None))
        conn.execute(schema.plans.delete().where(schema.plans.c.home_id == home_id))
        conn.execute(runs.delete().where(runs.c.home_id == home_id))
        conn.execute(homes.delete().where(homes.c.id == home_id))
        from ..store import settle_copies

        settle_copies(conn, identities)  # a copy in another home may now be the billed one
    backend_of(engine).settle_file(engine)
    return int(count)
