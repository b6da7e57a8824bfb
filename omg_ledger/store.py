"""Writing to the ledger: upserts, a run's rows replaced atomically, offsets.

Everything one run contributes — its derived rows, its new events, its resume offsets
— is written by :func:`write_run` inside the caller's single transaction, so a sync
killed at any instant leaves either the old or the new state of that run, never a mix.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import orjson
from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from . import schema
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


def _text_safe(row: dict) -> dict:
    """NUL cannot be stored in a PostgreSQL text column; a JSON string may carry one
    (\u0000). It becomes U+FFFD in derived text on every database, so SQLite and
    PostgreSQL ledgers agree; the event's raw line keeps the exact escape."""
    if not any(isinstance(v, str) and "\x00" in v for v in row.values()):
        return row
    return {k: v.replace("\x00", "\ufffd") if isinstance(v, str) else v for k, v in row.items()}


def _insert(conn: Connection, table):
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


def ensure_run(conn: Connection, home_id: int, run_id: str, dir_path: str) -> int:
    upsert(conn, schema.runs, {"home_id": home_id, "run_id": run_id, "dir_path": dir_path},
           ["home_id", "run_id"], [])
    return conn.execute(
        select(schema.runs.c.id).where(schema.runs.c.home_id == home_id, schema.runs.c.run_id == run_id)
    ).scalar_one()


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
        ts, at_us = parse_timestamp(data["ts"])
        events.append(Event(line_no, byte_offset, data, raw, ts, at_us))
    return events


def write_run(
    conn: Connection,
    run_pk: int,
    rows: RunRows,
    run_facts: dict,
    new_events: Sequence[Event],
    replace_events: bool,
    ingest: dict,
    snapshot_files: dict[str, dict | None],
) -> None:
    """Replace one run's derived rows and append its new events (caller's transaction)."""
    conn.execute(update(schema.runs).where(schema.runs.c.id == run_pk).values(**_text_safe({**rows.run, **run_facts})))
    if replace_events:
        conn.execute(delete(schema.events).where(schema.events.c.run_pk == run_pk))
    if new_events:
        conn.execute(schema.events.insert(), [_text_safe(_event_row(run_pk, e)) for e in new_events])
    for table in DERIVED_TABLES:
        conn.execute(delete(table).where(table.c.run_pk == run_pk))
    if rows.legs:
        conn.execute(schema.legs.insert(), [_text_safe(_leg_row(run_pk, leg)) for leg in rows.legs])
    if rows.nodes:
        conn.execute(schema.nodes.insert(), [_text_safe({"run_pk": run_pk, **node}) for node in rows.nodes])
    if rows.rounds:
        conn.execute(schema.rounds.insert(), [_text_safe(_round_row(run_pk, e)) for e in rows.rounds])
    if rows.charges:
        conn.execute(schema.charges.insert(), [_text_safe(_charge_row(run_pk, c)) for c in rows.charges])
    if rows.findings:
        conn.execute(
            schema.findings.insert(),
            [_text_safe({"run_pk": run_pk, "seq": i, "kind": f.kind, "node_id": f.node_id,
                         "leg_ordinal": f.leg_ordinal, "detail": f.detail})
             for i, f in enumerate(rows.findings, 1)],
        )
    if rows.goal_cycle is not None:
        conn.execute(schema.goal_cycles.insert(), _text_safe({"run_pk": run_pk, **rows.goal_cycle}))
    upsert(conn, schema.ingest_state, {"run_pk": run_pk, **ingest}, ["run_pk"], list(ingest))
    for name, values in snapshot_files.items():
        if values is None:
            conn.execute(delete(schema.snapshot_files).where(
                schema.snapshot_files.c.run_pk == run_pk, schema.snapshot_files.c.name == name))
        else:
            upsert(conn, schema.snapshot_files, _text_safe({"run_pk": run_pk, "name": name, **values}),
                   ["run_pk", "name"], list(values))


def record_problem(conn: Connection, run_pk: int | None, path: str, offset: int, reason: str, now: str) -> None:
    statement = _insert(conn, schema.problems).values(**_text_safe(dict(
        run_pk=run_pk, path=path, byte_offset=offset, reason=reason, first_seen_at=now, last_seen_at=now
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
