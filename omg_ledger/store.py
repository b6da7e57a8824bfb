"""Writing to the ledger: upserts, a run's rows replaced atomically, offsets.

Everything one run contributes — its derived rows, its new events, its resume offsets
— is written by :func:`write_run` inside the caller's single transaction, so a sync
killed at any instant leaves either the old or the new state of that run, never a mix.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence

import orjson
from sqlalchemy import delete, select, update
from sqlalchemy.engine import Connection

from . import schema
from .bounds import bounded_path, bounded_reason
from .feed import Event
from .reconcile import RunRows
from .units import parse_timestamp

DERIVED_TABLES = (
    schema.legs,
    schema.nodes,
    schema.rounds,
    schema.charges,
    schema.findings,
    schema.goal_cycles,
)


def _no_nul(value: object) -> object:
    """NUL cannot be stored in a PostgreSQL text column; a JSON string may carry one
    (\\u0000). It becomes U+FFFD in derived text on every database, so SQLite and
    PostgreSQL ledgers agree; the event's raw line keeps the exact escape."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


def _text_safe(row: dict) -> dict:
    return {k: _no_nul(v) for k, v in row.items()}


def _insert(conn: Connection, table):
    from sqlalchemy.dialects import postgresql, sqlite  # only the writers need them

    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


def upsert(conn: Connection, table, values: dict, keys: Sequence[str], update_columns: Iterable[str]) -> None:
    statement = _insert(conn, table).values(**values)
    columns = list(update_columns)
    if columns:
        statement = statement.on_conflict_do_update(
            index_elements=list(keys), set_={c: statement.excluded[c] for c in columns}
        )
    else:
        statement = statement.on_conflict_do_nothing(index_elements=list(keys))
    conn.execute(statement)


def ensure_home(conn: Connection, label: str, path: str) -> int:
    upsert(conn, schema.homes, {"label": label, "path": path}, ["label"], [])
    row = conn.execute(select(schema.homes.c.id, schema.homes.c.path).where(schema.homes.c.label == label)).one()
    if row.path != path:
        conn.execute(update(schema.homes).where(schema.homes.c.id == row.id).values(path=path))
    return row.id


def load_events(conn: Connection, run_pk: int) -> list[Event]:
    """The run's stored events, re-parsed from their original lines, in file order."""
    rows = conn.execute(
        select(schema.events.c.line_no, schema.events.c.byte_offset, schema.events.c.raw)
        .where(schema.events.c.run_pk == run_pk)
        .order_by(schema.events.c.line_no)
    )
    events = []
    for line_no, byte_offset, raw in rows:
        data = orjson.loads(raw)
        ts, at_us = parse_timestamp(data["ts"], check_range=False)  # accepted when it was stored
        events.append(Event(line_no, byte_offset, data, raw, ts, at_us))
    return events


class _Statements:
    """Driver-level SQL for the hot path, built once per dialect.

    A cold sync writes ~15 statements per run; building each one through SQLAlchemy's
    expression layer cost more than SQLite's own work. These are plain parameterised
    statements (never values pasted into text), executed with tuples.
    """

    def __init__(self, dialect: str) -> None:
        self.mark = "%s" if dialect == "postgresql" else "?"
        self.columns = {t.name: [c.name for c in t.columns] for t in schema.metadata.sorted_tables}
        self.defaults = {
            t.name: {c.name: c.default.arg for c in t.columns if c.default is not None and c.default.is_scalar}
            for t in schema.metadata.sorted_tables
        }
        # Every column with its default, so a row is one dict merge and one C-level
        # itemgetter call, not a Python loop per column.
        self._base = {t: {c: self.defaults[t].get(c) for c in cols} for t, cols in self.columns.items()}
        self._getters = {t: operator.itemgetter(*cols) for t, cols in self.columns.items()}
        self._cache: dict[tuple, str] = {}

    def insert(self, table: str) -> str:
        key = ("insert", table)
        if key not in self._cache:
            cols = self.columns[table]
            self._cache[key] = (f"INSERT INTO {table} ({', '.join(cols)}) "
                                f"VALUES ({', '.join([self.mark] * len(cols))})")
        return self._cache[key]

    def row(self, table: str, values: dict) -> tuple:
        return self._getters[table]({**self._base[table], **values})

    def insert_run(self) -> str:
        key = ("insert_run",)
        if key not in self._cache:
            cols = [c for c in self.columns["runs"] if c != "id"]
            self._cache[key] = (f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join([self.mark] * len(cols))}) "
                                f"ON CONFLICT (home_id, run_id) DO NOTHING RETURNING id")
        return self._cache[key]

    def update_run(self, keys: tuple[str, ...]) -> str:
        key = ("update_run", keys)
        if key not in self._cache:
            sets = ", ".join(f"{k} = {self.mark}" for k in keys)
            self._cache[key] = f"UPDATE runs SET {sets} WHERE id = {self.mark}"
        return self._cache[key]

    def delete_run_rows(self, table: str) -> str:
        return f"DELETE FROM {table} WHERE run_pk = {self.mark}"


_STATEMENTS: dict[str, _Statements] = {}


def _statements(conn: Connection) -> _Statements:
    name = conn.dialect.name
    if name not in _STATEMENTS:
        _STATEMENTS[name] = _Statements(name)
    return _STATEMENTS[name]


def _scrub(row: tuple) -> tuple:
    return tuple(_no_nul(v) for v in row)


def write_run(
    conn: Connection,
    run_pk: int | None,
    home_id: int,
    run_id: str,
    rows: RunRows,
    run_facts: dict,
    new_events: Sequence[Event],
    replace_events: bool,
    ingest: dict,
    snapshot_files: dict[str, dict | None],
    scrub: bool = False,
) -> int:
    """Replace one run's derived rows and append its new events (caller's transaction).

    ``run_pk`` None means a run the ledger has never seen: it is inserted whole and has
    no old rows to delete. ``scrub`` (some text of this run holds a NUL, which
    PostgreSQL cannot store) turns NUL into U+FFFD in derived text on every backend, so
    the two agree; events.raw keeps the exact escape. Returns the run's key.
    """
    sql = _statements(conn)
    run_values = {**rows.run, **run_facts}
    fix = _scrub if scrub else (lambda row: row)
    if run_pk is None:
        values = {**run_values, "home_id": home_id, "run_id": run_id}
        full = sql.row("runs", values)[1:]  # every column but id
        run_pk = conn.exec_driver_sql(sql.insert_run(), fix(full)).scalar()
        if run_pk is None:  # it existed after all (not expected under the sync lock)
            run_pk = conn.execute(select(schema.runs.c.id).where(
                schema.runs.c.home_id == home_id, schema.runs.c.run_id == run_id)).scalar_one()
            fresh = False
        else:
            fresh = True
    else:
        fresh = False
    if not fresh:
        keys = tuple(run_values)
        conn.exec_driver_sql(sql.update_run(keys), (*fix(tuple(run_values[k] for k in keys)), run_pk))
        if replace_events:
            conn.exec_driver_sql(sql.delete_run_rows("events"), (run_pk,))
        for table in DERIVED_TABLES:
            conn.exec_driver_sql(sql.delete_run_rows(table.name), (run_pk,))

    def insert(table: str, dicts: list[dict]) -> None:
        if dicts:
            conn.exec_driver_sql(sql.insert(table), [fix(sql.row(table, {"run_pk": run_pk, **d})) for d in dicts])

    insert("events", [_event_row(run_pk, e) for e in new_events])
    insert("legs", [_leg_row(run_pk, leg) for leg in rows.legs])
    insert("nodes", rows.nodes)
    insert("rounds", [_round_row(run_pk, e) for e in rows.rounds])
    insert("charges", [_charge_row(run_pk, c) for c in rows.charges])
    insert("findings", [{"seq": i, "kind": f.kind, "node_id": f.node_id, "leg_ordinal": f.leg_ordinal,
                         "detail": f.detail} for i, f in enumerate(rows.findings, 1)])
    insert("goal_cycles", [rows.goal_cycle] if rows.goal_cycle is not None else [])
    if fresh:
        insert("ingest_state", [ingest])
    else:
        upsert(conn, schema.ingest_state, {"run_pk": run_pk, **ingest}, ["run_pk"], list(ingest))
    for name, values in snapshot_files.items():
        if values is None:
            conn.execute(delete(schema.snapshot_files).where(
                schema.snapshot_files.c.run_pk == run_pk, schema.snapshot_files.c.name == name))
        elif fresh:
            conn.exec_driver_sql(sql.insert("snapshot_files"),
                                 _scrub(sql.row("snapshot_files", {"run_pk": run_pk, "name": name, **values})))
        else:
            upsert(conn, schema.snapshot_files, _text_safe({"run_pk": run_pk, "name": name, **values}),
                   ["run_pk", "name"], list(values))
    return run_pk


def record_problem(conn: Connection, run_pk: int | None, path: str, offset: int, reason: str, now: str) -> None:
    statement = _insert(conn, schema.problems).values(**_text_safe(dict(
        run_pk=run_pk, path=bounded_path(path), byte_offset=offset, reason=bounded_reason(reason),
        first_seen_at=now, last_seen_at=now
    )))
    statement = statement.on_conflict_do_update(
        index_elements=["path", "byte_offset", "reason"],
        set_={"last_seen_at": statement.excluded.last_seen_at, "run_pk": statement.excluded.run_pk},
    )
    conn.execute(statement)


def _event_row(run_pk: int, event: Event) -> dict:
    data = event.data
    return {
        "run_pk": run_pk,
        "line_no": event.line_no,
        "byte_offset": event.byte_offset,
        "schema": data.get("schema"),
        "ts": data.get("ts"),
        "event": data.get("event"),
        "node_id": data.get("node_id"),
        "raw": event.raw,
    }


def _leg_row(run_pk: int, leg) -> dict:
    return {"run_pk": run_pk, **{k: getattr(leg, k) for k in (
        "ordinal", "phase", "kind", "started_at", "started_at_us", "finished_at", "outcome", "detail",
        "is_open", "closed_by", "session_limited", "start_line", "end_line")}}


def _round_row(run_pk: int, execution) -> dict:
    return {"run_pk": run_pk, **{k: getattr(execution, k) for k in (
        "leg_ordinal", "node_id", "seq", "round", "started_at", "ended_at", "outcome", "retries",
        "session_id", "provenance", "detail", "cost_nano_usd", "cost_unknown", "start_line", "end_line")}}


def _charge_row(run_pk: int, charge) -> dict:
    input_tokens, cached, output, reasoning = charge.tokens
    return {
        "run_pk": run_pk,
        "seq": charge.seq,
        "leg_ordinal": charge.leg_ordinal,
        "leg_kind": charge.leg_kind,
        "node_id": charge.node_id,
        "round": charge.round,
        "kind": charge.kind,
        "at": charge.at,
        "at_us": charge.at_us,
        "cost_nano_usd": charge.cost_nano_usd,
        "cost_unknown": charge.cost_unknown,
        "input_tokens": input_tokens,
        "cached_input_tokens": cached,
        "output_tokens": output,
        "reasoning_output_tokens": reasoning,
        "source_file": charge.source_file,
        "source_offset": charge.source_offset,
        "source_line": charge.source_line,
    }
