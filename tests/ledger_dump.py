"""Dump every table of a ledger in a canonical, comparable form.

Two ledgers built from the same files must dump equal (DESIGN.md invariant 1), however
they got there: one clean sync, or a sync killed at a random instant and a second one
that finished the job, or many incremental syncs of a growing stream.

What is normalised, and why (everything else is compared verbatim):

* **Surrogate keys** (``homes.id``, ``runs.id``, ``problems.id`` and every ``run_pk`` /
  ``home_id`` that points at them) are replaced by the natural keys they stand for —
  the home's label and ``(home label, run_id)``. Their numeric values depend on
  insertion order and, on PostgreSQL, on sequence values consumed by transactions a
  kill rolled back; no user query may rely on them.
* **problems.first_seen_at / last_seen_at** and **homes.last_synced_at** are wall-clock
  times of the syncs that saw the problem or the home, not facts about the files.
* **ingest_state.dir_mtime_ns / failed_dir_mtime_ns** (and the ctimes seen with them) are compared only when
  ``cache_hints=True``. They are a rescan cache: the sync stores NULL instead of the
  mtime while the directory changed within the last two seconds (the "racy mtime" rule
  in discover.trusted_mtime), so the value depends on *when* the sync ran. NULL only
  forces a rescan; it never changes a derived row. Tests that age the home's mtimes
  first (so every sync trusts them) compare them too.

Rows are sorted, so table order and row order do not matter; booleans stored as 0/1
(SQLite) and True/False (PostgreSQL) compare equal because SQLAlchemy's types read
them back as bool.
"""

from __future__ import annotations

from sqlalchemy import create_engine, inspect, select
from sqlalchemy.engine import Engine

from omg_ledger import schema
from omg_ledger.db import database_url

VOLATILE = {
    "problems": {"id", "first_seen_at", "last_seen_at"},
    "homes": {"last_synced_at"},  # wall-clock time of the last sync, not a fact about the files
}
CACHE_HINTS = {"ingest_state": {"dir_mtime_ns", "failed_dir_mtime_ns", "dir_ctime_ns", "failed_dir_ctime_ns"}}


# Tables whose surrogate ``id`` stands for a natural key: {table: natural key columns}.
# A column holding a foreign key to one of these ids is dumped as that natural key.
NATURAL_KEYS = {
    "homes": ("label",),
    "runs": ("home_id", "run_id"),
    "streams": ("kind", "source", "path"),
}


def dump(target: str | Engine, *, cache_hints: bool = False) -> dict[str, list[tuple]]:
    """{table name: sorted list of row tuples (column name, value)} for the whole ledger."""
    engine = target if isinstance(target, Engine) else create_engine(database_url(target))
    try:
        with engine.connect() as conn:
            present = set(inspect(conn).get_table_names())
            unexpected = present - set(schema.metadata.tables) - {"alembic_version"}
            assert not unexpected, f"tables the dump does not know how to normalise: {unexpected}"
            natural: dict[str, dict] = {}
            for name in ("homes", "runs", "streams"):  # homes before runs before streams
                if name not in present:
                    continue
                table = schema.metadata.tables[name]
                mapping = {}
                for row in conn.execute(select(table)):
                    m = row._mapping
                    key = tuple(natural["homes"][m[c]] if c == "home_id" else _source(m[c], natural) if c == "source"
                                else m[c] for c in NATURAL_KEYS[name])
                    mapping[m["id"]] = key[0] if len(key) == 1 else key
                natural[name] = mapping
            out: dict[str, list[tuple]] = {}
            for name, table in schema.metadata.tables.items():
                if name not in present:
                    continue
                skip = set(VOLATILE.get(name, ()))
                if not cache_hints:
                    skip |= CACHE_HINTS.get(name, set())
                if name in NATURAL_KEYS:
                    skip.add("id")
                refs = {}
                for column in table.c:
                    for fk in column.foreign_keys:
                        if fk.column.table.name in NATURAL_KEYS:
                            refs[column.name] = natural[fk.column.table.name]
                rows = []
                for row in conn.execute(select(table)):
                    items = []
                    for column, value in row._mapping.items():
                        if column in skip:
                            continue
                        if column in refs and value is not None:
                            value = refs[column][value]
                        elif name == "streams" and column == "source":
                            value = _source(value, natural)
                        items.append((column, value))
                    rows.append(tuple(items))
                rows.sort(key=repr)  # canonical, cheap, and total (no None-vs-int comparisons)
                out[name] = rows
            out["alembic_version"] = sorted(
                (r[0],) for r in conn.exec_driver_sql("SELECT version_num FROM alembic_version")
            )
            return out
    finally:
        if not isinstance(target, Engine):
            engine.dispose()


def _source(value: str, natural: dict) -> str:
    """A run stream's source names its home by surrogate id: dump the label instead."""
    if value.startswith("home:"):
        return "home:" + str(natural["homes"].get(int(value[5:]), value))
    return value


def runs_of(dumped: dict[str, list[tuple]]) -> dict[tuple, dict[str, list[tuple]]]:
    """Split a dump by run: {(home label, run_id): {table: rows}} for every table keyed by
    run_pk (rows of the runs table itself under "runs")."""
    out: dict[tuple, dict[str, list[tuple]]] = {}
    for name, rows in dumped.items():
        if name == "alembic_version":
            continue
        for row in rows:
            d = dict(row)
            if name == "runs":
                key = (d["home_id"], d["run_id"])
            elif "run_pk" in d and name != "problems":
                key = d["run_pk"]
            else:
                continue
            out.setdefault(key, {}).setdefault(name, []).append(row)
    return out


def diff(a: dict[str, list[tuple]], b: dict[str, list[tuple]], limit: int = 5) -> str:
    """A short human-readable difference between two dumps ('' when equal)."""
    lines = []
    for name in sorted(set(a) | set(b)):
        left, right = a.get(name, []), b.get(name, [])
        if left == right:
            continue
        only_left = [r for r in left if r not in right]
        only_right = [r for r in right if r not in left]
        lines.append(f"{name}: {len(left)} vs {len(right)} rows")
        for r in only_left[:limit]:
            lines.append(f"  - {dict(r)}")
        for r in only_right[:limit]:
            lines.append(f"  + {dict(r)}")
        if not only_left and not only_right:
            lines.append("  (same rows, different multiplicity: duplicates)")
    return "\n".join(lines)


def counts(target: str | Engine) -> dict[str, int]:
    return {name: len(rows) for name, rows in dump(target).items()}


def with_file_ctimes_unknown(dumped: dict[str, list[tuple]], run_ids: set[str] | None = None) -> dict[str, list[tuple]]:
    """A dump as a ledger upgraded across migration 0014 holds it: each JSON file's ctime
    unknown (NULL), since no migration can know it, until a sync reads the file again
    (never, for a gone run's). ``run_ids``: only those runs' files (default: every run's)."""
    def unknown(row: tuple) -> bool:
        return run_ids is None or dict(row)["run_pk"][1] in run_ids

    rows = sorted(tuple((k, None if k == "ctime_ns" and unknown(row) else v) for k, v in row)
                  for row in dumped["snapshot_files"])
    return {**dumped, "snapshot_files": rows}
