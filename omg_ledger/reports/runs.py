"""`runs` and `show`: one row per run with its live status; one run in full.

Both read through the DB-API (backend.reading) in SQL text: the listing is the hot path
of `runs` and `audit`, and importing SQLAlchemy alone costs more than either's queries.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import orjson

from ..backend import bind_list, reading
from ..errors import AmbiguousRun, RunNotFound
from ..status import (
    ABANDONED,
    FACT_COLUMNS,
    FAIL,
    NOT_KNOWN_YET,
    PASS,
    PAUSED,
    PLANNING,
    RECHECKED,
    RUNNING,
    Copy,
    StatusFacts,
    bytes_after_last_line,
    confirm_abandoned,
    hint,
    node_state,
    not_probed,
    pause_reason,
    recheck,
    status_across_copies,
    status_of,
    status_without_own_copy,
    stream_changed_since_sync,
    unrecorded_attempts,
)
from ..tail import Checkpoint, machine_source
from ..units import NANOS_PER_USD, nanos_to_usd
from .graphs import graph_condition

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

# What a listing needs (the status facts and the summary), not every snapshot column:
# over 10,000 runs, fetching the rest cost more than everything else `runs` does.
# A row is read by position: _summary unpacks the summary columns, then the status facts
# (status.FACT_COLUMNS, in their order), then the home label.
_SUMMARY_COLUMNS = (
    "id", "run_id", "dir_path", "gone", "runtime", "graph_name", "node_count", "nodes_passed", "leg_count",
    "cost_nano_usd", "invocations", "unknown_cost_invocations", "unrecorded_attempts", "input_tokens",
    "cached_input_tokens", "output_tokens", "reasoning_output_tokens", "first_event_at", "last_event_at")
LIST_COLUMNS = _SUMMARY_COLUMNS + FACT_COLUMNS
_FACTS = slice(len(_SUMMARY_COLUMNS), len(LIST_COLUMNS))
_LIST_SQL = ("SELECT " + ", ".join(f"r.{name}" for name in LIST_COLUMNS) + ", h.label"
             " FROM runs r JOIN homes h ON h.id = r.home_id")
_RUN_ID, _DIR_PATH = LIST_COLUMNS.index("run_id"), LIST_COLUMNS.index("dir_path")
# The nodes left running by every run whose last leg is open (only such a run can be
# ABANDONED): read once for a listing, when its first abandoned run is met. A query per
# abandoned run cost a round trip each on PostgreSQL (~200 of them at 10,000 runs).
# (The IN form makes SQLite start from ix_runs_last_leg_open; the plain join scanned
# every node row: 13 ms against 2 ms at 10,000 runs.)
_RUNNING_NODES_SQL = ("SELECT h.label, r.run_id, n.node_id FROM nodes n JOIN runs r ON r.id = n.run_pk "
                      "JOIN homes h ON h.id = r.home_id "
                      "WHERE n.run_pk IN (SELECT id FROM runs WHERE last_leg_open) AND n.state = 'running' "
                      "ORDER BY h.label, r.run_id, n.node_id")


# Runs whose status the stream may have moved on from since the last sync: an open last
# leg (it may have closed), a stored PAUSED or FAIL (it may have been resumed) and a run
# with no leg yet (status.RECHECKED, status.confirm_abandoned); a PASS is final. Wider than that where it costs
# nothing (status decides).
_MAY_MOVE_ON_SQL = ("(r.last_leg_open OR r.last_outcome IS NULL OR r.last_outcome <> 'passed' "
                    "OR NOT COALESCE(r.all_nodes_passed, FALSE))")

# Their stream checkpoints: read once for a listing, when the first run that needs one is
# met (status.confirm_abandoned, status.recheck).
_CHECKPOINTS_SQL = ("SELECT s.run_pk, " + ", ".join(f"s.{name}" for name in Checkpoint.COLUMNS)
                    + f" FROM streams s WHERE s.run_pk IN (SELECT r.id FROM runs r WHERE {_MAY_MOVE_ON_SQL})")


def checkpoints(reader) -> dict[int, Checkpoint]:
    """Row id → its stream's checkpoint, for every run whose stream may have moved on."""
    return {row[0]: Checkpoint(*row[1:]) for row in reader.rows(_CHECKPOINTS_SQL)}


# Every other copy of a run (keyed by the run's row id) as status.Copy needs it: where it
# is, its stored facts and its stream's checkpoint. For a listing, read once for every run
# whose last leg is open, when its first abandoned run is met, since a copy's lock or
# stream can keep such a run from being ABANDONED (status.status_across_copies).
# A copy without its stream's first line (none, or its head damaged: '<run id>:no-stream')
# is a copy of the runs with its id, as they are of it: a live run whose head a crash
# damaged is billed as its intact backup when that holds more events, and its held lock
# keeps the run in flight. (Each term finds c by ix_runs_stream_identity; the patterns
# are bound: see _STREAM_LESS_SQL.)
_COPIES_SQL = ("SELECT r.id, c.dir_path, ch.machine, c.gone, " + ", ".join(f"c.{name}" for name in FACT_COLUMNS)
               + ", s.run_pk, " + ", ".join(f"s.{name}" for name in Checkpoint.COLUMNS)
               + " FROM runs r JOIN runs c ON c.id <> r.id AND (c.stream_identity = r.stream_identity"
               " OR c.stream_identity = (r.run_id || :stream_less_tail)"
               " OR (r.stream_identity LIKE :stream_less AND c.stream_identity >= (r.run_id || :colon)"
               " AND c.stream_identity < (r.run_id || :semicolon) AND c.run_id = r.run_id))"
               " JOIN homes ch ON ch.id = c.home_id LEFT JOIN streams s ON s.run_pk = c.id")
_FACTS_OF_COPY = slice(4, 4 + len(FACT_COLUMNS))


def _copies_params() -> dict:
    """_COPIES_SQL's parameters. A run id's identities are '<run id>:' and a hash or
    'no-stream': from '<run id>:' up to (not with) '<run id>;'."""
    return {"stream_less_tail": STREAM_LESS, "stream_less": STREAM_LESS_PATTERN, "colon": ":", "semicolon": ";"}


def _copy(row: tuple) -> Copy | None:
    """A copy from a _COPIES_SQL row; None for a copy on another machine that its own
    machine's sync found gone (it says nothing)."""
    _pk, dir_path, machine, gone = row[:4]
    if machine != machine_source():
        if gone:
            return None
        dir_path = None  # its lock cannot be probed here
    stream = row[_FACTS_OF_COPY.stop:]
    checkpoint = Checkpoint(*stream[1:]) if stream[0] is not None else None
    return Copy(dir_path, StatusFacts.from_columns(*row[_FACTS_OF_COPY]), checkpoint)


def copies_of_unsettled_runs(reader) -> dict[int, list[Copy]]:
    """Row id → the run's other copies, for every run not settled for good: whose stream
    may have moved on since the last sync (_MAY_MOVE_ON_SQL)."""
    copies: dict[int, list[Copy]] = {}
    for row in reader.rows(_COPIES_SQL + f" WHERE {_MAY_MOVE_ON_SQL} ORDER BY r.id, c.id", _copies_params()):
        copy = _copy(row)
        if copy is not None:
            copies.setdefault(row[0], []).append(copy)
    return copies


def copies_of(reader, pk: int) -> list[Copy]:
    """The other copies of the run in row ``pk``."""
    rows = reader.rows(_COPIES_SQL + " WHERE r.id = :pk ORDER BY c.id", {"pk": pk, **_copies_params()})
    return [copy for copy in map(_copy, rows) if copy is not None]


def home_machines(reader) -> dict[str, str | None]:
    """Home label → the machine it is on."""
    return dict(reader.rows("SELECT label, machine FROM homes"))


def running_nodes(reader) -> dict[tuple[str, str], list[str]]:
    """(home label, run id) → the ids of the nodes it leaves running, in id order, for
    every run whose last leg is open (status.node_state's interrupted nodes when the run
    is ABANDONED)."""
    nodes: dict[tuple[str, str], list[str]] = {}
    for home, run_id, node_id in reader.rows(_RUNNING_NODES_SQL):
        nodes.setdefault((home, run_id), []).append(node_id)
    return nodes


def _money(nanos: int | None) -> float | None:
    if type(nanos) is int:
        # int / int is correctly rounded in Python, as float(Decimal(nanos) / 10**9) is:
        # the same float, without a Decimal per run.
        return nanos / NANOS_PER_USD
    value = nanos_to_usd(nanos)
    return None if value is None else float(value)


def could_be_sql(status: str) -> str:
    """status.could_be in SQL text (tests/test_reports_dbapi.py holds them equal): a
    pre-filter keeping every run that could have ``status``; status_of decides."""
    if status == NOT_KNOWN_YET:
        return f"((NOT r.any_leg AND r.snapshot_schema IS NULL AND NOT r.has_state) OR r.stream_paused OR {_MAY_MOVE_ON_SQL})"
    if status in (PASS, FAIL):
        return "TRUE"
    return _MAY_MOVE_ON_SQL


def _summary(row: tuple, status: str, left_running: int, facts: StatusFacts, unprobed: str | None = None) -> dict:
    """One run's listing row from a tuple of LIST_COLUMNS (+ label), read by position:
    `runs` builds 10,000 of them, and a dict per fetched row cost more than this does."""
    (_pk, run_id, _dir_path, gone, runtime, graph_name, node_count, nodes_passed, leg_count, cost_nano_usd,
     invocations, unknown_cost_invocations, unrecorded, input_tokens, cached_input_tokens, output_tokens,
     reasoning_output_tokens, first_event_at, last_event_at, _any_leg, _open, _phase, _outcome, _detail, _schema,
     _has_state, _all_passed, gate_paused_at, _stream_paused, home_label) = row
    return {
        "run_id": run_id,
        "home": home_label,
        "graph": graph_name,
        "runtime": runtime,
        "status": status,
        "nodes_total": node_count,
        "nodes_passed": nodes_passed,
        "leg_count": leg_count,  # as the engine counts (unphased legs); show's "legs" lists them all
        "cost_usd": _money(cost_nano_usd),
        "cost_nano_usd": cost_nano_usd,
        "invocations": invocations,
        "unknown_cost_invocations": unknown_cost_invocations,
        "unrecorded_attempts": unrecorded_attempts(unrecorded, left_running, status),
        "input_tokens": input_tokens,
        "cached_input_tokens": cached_input_tokens,
        "output_tokens": output_tokens,
        "reasoning_output_tokens": reasoning_output_tokens,
        "started_at": first_event_at,
        "last_event_at": last_event_at,
        "gone": bool(gone),
        "has_snapshot": facts.has_snapshot,
        "paused_for": pause_reason(facts) if status == PAUSED else None,
        "gate": gate_paused_at,
        "nodes_interrupted": left_running if status == ABANDONED else 0,  # killed calls, unrecorded
        "hint": hint(status, run_id, facts, unprobed),
    }


def run_summary(row, status: str, home_label: str, left_running: int = 0, facts: StatusFacts | None = None,
                unprobed: str | None = None) -> dict:
    """One run's listing row. ``left_running``: nodes the stream leaves running in the
    open leg (only read when the run is ABANDONED: their killed calls are unrecorded).
    ``facts``: the row's StatusFacts when the caller has them already. ``unprobed``: why
    its open leg's lock could not be probed here (status.not_probed)."""
    m = row._mapping if hasattr(row, "_mapping") else row
    values = (*(m[name] for name in LIST_COLUMNS), home_label)
    return _summary(values, status, left_running, facts or StatusFacts.from_columns(*values[_FACTS]), unprobed)


def iter_runs(engine: Engine, since_us: int | None = None, statuses: tuple[str, ...] = (),
              home_labels: tuple[str, ...] = (), graphs: tuple[str, ...] = (), *,
              until_us: int | None = None) -> Iterator[dict]:
    """Newest first, one summary at a time (10,000 runs are never all in memory).
    Only runs whose last leg is open get a live lock probe. ``since_us``/``until_us``:
    the runs with an event in [since, until) — the last at or after since, the first
    before until."""
    conditions, params = ["r.billed"], {}  # a run seen in several homes is listed once, as its billed copy
    if since_us is not None:
        conditions.append("r.last_event_at_us >= :since_us")
        params["since_us"] = since_us
    if until_us is not None:
        conditions.append("r.first_event_at_us < :until_us")
        params["until_us"] = until_us
    if home_labels:
        # A run held in the home, as its billed copy wherever that is (the row names that
        # home): a backup's runs are not hidden because another home's copy is billed.
        labels = bind_list(params, "home", home_labels)
        params["stream_less"] = STREAM_LESS_PATTERN
        copies_held = (f"SELECT c.run_id FROM runs c JOIN homes ch ON ch.id = c.home_id "
                       f"WHERE NOT c.billed AND ch.label IN {labels}")
        conditions.append(f"(h.label IN {labels} OR r.stream_identity IN (SELECT c.stream_identity FROM runs c "
                          f"JOIN homes ch ON ch.id = c.home_id WHERE NOT c.billed AND ch.label IN {labels}) "
                          f"OR r.run_id IN ({copies_held} AND {_STREAM_LESS_SQL.format('c')}) "
                          f"OR ({_STREAM_LESS_SQL.format('r')} AND r.run_id IN ({copies_held})))")
    if graphs:
        conditions.append(graph_condition("r.graph_name", graphs, params))
    if statuses:
        conditions.append("(" + " OR ".join(dict.fromkeys(could_be_sql(status) for status in statuses)) + ")")
    query = f"{_LIST_SQL} WHERE {' AND '.join(conditions)} ORDER BY r.run_id DESC, h.label"
    from_columns = StatusFacts.from_columns
    left_running = copies = stream_checkpoints = None
    here = machine_source()

    def copies_of_run(run_pk: int) -> list:
        """Its copies here, of the runs that may still move on (read once, when first asked)."""
        nonlocal copies
        if copies is None:
            copies = copies_of_unsettled_runs(reader)
        return copies.get(run_pk, [])

    with reading(engine) as reader:
        machines = home_machines(reader)
        for row in reader.rows(query, params):
            facts = from_columns(*row[_FACTS])
            machine = machines.get(row[-1])
            elsewhere = None if machine == here else machine or "unknown"
            status = status_of(facts, row[_DIR_PATH], here=elsewhere is None)
            if status == ABANDONED or (elsewhere is None and status in RECHECKED):
                if stream_checkpoints is None:
                    stream_checkpoints = checkpoints(reader)
                checkpoint = stream_checkpoints.get(row[0])
                if status == ABANDONED:
                    status, facts = confirm_abandoned(facts, row[_DIR_PATH], checkpoint)
                else:
                    status, facts = recheck(status, facts, row[_DIR_PATH], checkpoint,
                                            functools.partial(copies_of_run, row[0]))
            if status == ABANDONED:
                status, facts = status_across_copies(status, facts, copies_of_run(row[0]))
            elif status in (RUNNING, PLANNING) and elsewhere is None and not os.path.isdir(row[_DIR_PATH]):
                # Its own directory is gone: other copies of it here may still answer.
                status, facts = status_without_own_copy(status, facts, row[_DIR_PATH], copies_of_run(row[0]))
            if statuses and status not in statuses:
                continue
            left = 0
            if status == ABANDONED:
                if left_running is None:
                    left_running = running_nodes(reader)
                left = len(left_running.get((row[-1], row[_RUN_ID]), ()))
            unprobed = not_probed(facts, row[_DIR_PATH], elsewhere) if status in (RUNNING, PLANNING) else None
            yield _summary(row, status, left, facts, unprobed)


def list_runs(engine: Engine, since_us: int | None = None, statuses: tuple[str, ...] = (),
              home_labels: tuple[str, ...] = (), graphs: tuple[str, ...] = ()) -> list[dict]:
    return list(iter_runs(engine, since_us, statuses, home_labels, graphs))


AMBIGUOUS_LISTED = 20
# A copy with no line of its stream (or no first one: its head damaged), a copy of the run
# with its id that has one (store.settle_copies): one run with its streamed copies, billed
# where it holds more of the stream.
# (Its pattern is bound: the PostgreSQL reader would take a ':name' in a literal for a parameter.)
_STREAM_LESS_SQL = "{0}.stream_identity LIKE :stream_less"
STREAM_LESS = ":no-stream"  # derive.STREAM_LESS, not imported: reading commands do not import the rules
STREAM_LESS_PATTERN = "%" + STREAM_LESS


def _stream_less(row: dict) -> bool:
    return (row["stream_identity"] or "").endswith(STREAM_LESS)


_RUN_SQL = "SELECT r.*, h.label, h.machine AS home_machine FROM runs r JOIN homes h ON h.id = r.home_id"


def _run_rows(reader, conditions: list[str], params: dict, order_by: str = "h.label") -> list[dict]:
    return reader.with_booleans("runs", reader.dicts(f"{_RUN_SQL} WHERE {' AND '.join(conditions)} "
                                                     f"ORDER BY {order_by}", params))


def _like_prefix(text: str) -> str:
    """A LIKE pattern for what starts with ``text`` (its own %, _ and / escaped by /)."""
    return text.replace("/", "//").replace("%", "/%").replace("_", "/_") + "%"


def resolve_run(reader, run_id: str, home_label: str | None = None) -> dict:
    """The run an id (or a unique prefix) names, as its `runs` columns and its home's
    label. Copies of one run in several homes are one run: its billed copy, unless
    ``home_label`` picks a copy."""
    conditions, params = [], {}
    if home_label is not None:
        conditions.append("h.label = :home")
        params["home"] = home_label
    exact = _run_rows(reader, [*conditions, "r.run_id = :run_id"], {**params, "run_id": run_id})
    if len(exact) == 1:
        return exact[0]
    if len(exact) > 1:
        streamed = {row["stream_identity"] for row in exact if not _stream_less(row)}
        billed = [row for row in exact if row["billed"]]
        if len(streamed) <= 1 and None not in streamed and len(billed) == 1:
            return billed[0]  # its copies, stream-less ones with them: one run
        labels = ", ".join(row["label"] for row in exact)
        raise AmbiguousRun(f"run {run_id} is in {len(exact)} homes ({labels}) and they are different runs; "
                           f"pick one with --home LABEL")
    candidates = _run_rows(reader, [*conditions, "r.run_id LIKE :prefix ESCAPE '/'"],
                           {**params, "prefix": _like_prefix(run_id)}, order_by="r.run_id, h.label")
    billed = {c["stream_identity"] for c in candidates if c["billed"] and c["stream_identity"] is not None}
    billed_ids = {c["run_id"] for c in candidates if c["billed"]}
    billed_stream_less = {c["run_id"] for c in candidates if c["billed"] and _stream_less(c)}
    candidates = [c for c in candidates if c["billed"] or (  # copies are one run
        c["stream_identity"] not in billed and not (_stream_less(c) and c["run_id"] in billed_ids)
        and c["run_id"] not in billed_stream_less)]
    if not candidates:
        raise RunNotFound(f"no run matches {run_id!r} (try `omg-ledger runs` to list them)")
    if len(candidates) > 1:
        shown = candidates[:AMBIGUOUS_LISTED]
        names = ", ".join(f"{c['run_id']} ({c['label']})" for c in shown)
        more = len(candidates) - len(shown)
        tail = f", and {more} more not listed" if more else ""
        raise AmbiguousRun(f"{run_id!r} matches {len(candidates)} runs: {names}{tail}; give a longer prefix")
    return candidates[0]


def resolve_run_ids(engine: Engine, given: Sequence[str]) -> list[str]:
    """The run ids ``given`` names: each an id the ledger holds (in every home that holds
    it), or a unique prefix of one, as `show` takes it."""
    named: list[str] = []
    if not given:
        return named
    with reading(engine) as reader:
        for run_id in given:
            held = list(reader.rows("SELECT 1 FROM runs WHERE run_id = :run_id", {"run_id": run_id}))
            named.append(run_id if held else resolve_run(reader, run_id)["run_id"])
    return list(dict.fromkeys(named))


def show_run(engine: Engine, run_id: str, home_label: str | None = None) -> dict:
    """One run in full, read through the DB-API like the listing (`show` on a SQLite
    ledger imports no SQLAlchemy)."""
    with reading(engine) as reader:
        row = resolve_run(reader, run_id, home_label)
        other_copies = (list(reader.rows(
            "SELECT h.label, r.dir_path FROM runs r JOIN homes h ON h.id = r.home_id "
            f"WHERE (r.stream_identity = :identity OR (r.run_id = :run_id AND ({_STREAM_LESS_SQL.format('r')} "
            f"OR :identity LIKE :stream_less))) AND r.id <> :pk ORDER BY h.label",
            {"identity": row["stream_identity"], "run_id": row["run_id"], "pk": row["id"],
             "stream_less": STREAM_LESS_PATTERN}))
            if row["stream_identity"] is not None else [])
        copies = [label for label, _dir in other_copies]
        of_run = {"pk": row["id"]}
        legs = reader.table_rows("legs", "run_pk = :pk", of_run, "ordinal")
        nodes = reader.table_rows("nodes", "run_pk = :pk", of_run, "node_id")
        rounds = reader.table_rows("rounds", "run_pk = :pk", of_run, "leg_ordinal, node_id, seq")
        charges = reader.table_rows("charges", "run_pk = :pk", of_run, "seq")
        findings = reader.table_rows("findings", "run_pk = :pk", of_run, "seq")
        goal = reader.table_rows("goal_cycles", "run_pk = :pk", of_run, "run_pk")
        problems = reader.table_rows("problems", "run_pk = :pk", of_run, "path, byte_offset")
        stream = list(reader.rows("SELECT " + ", ".join(Checkpoint.COLUMNS) + " FROM streams WHERE run_pk = :pk",
                                  of_run))
        other_copies_now = copies_of(reader, row["id"])
    facts = StatusFacts.from_row(row)
    elsewhere = None if row["home_machine"] == machine_source() else row["home_machine"] or "unknown"
    status = status_of(facts, row["dir_path"], here=elsewhere is None)
    checkpoint = Checkpoint(*stream[0]) if stream else None
    if status == ABANDONED:
        status, facts = confirm_abandoned(facts, row["dir_path"], checkpoint)
    elif elsewhere is None:
        status, facts = recheck(status, facts, row["dir_path"], checkpoint, lambda: other_copies_now)
    status, facts = status_across_copies(status, facts, other_copies_now)
    if elsewhere is None:
        status, facts = status_without_own_copy(status, facts, row["dir_path"], other_copies_now)
    left_running = sum(1 for node in nodes if node["state"] == "running")
    for node in nodes:
        node["state"] = node_state(node["state"], status)
        node["unrecorded_attempts"] = unrecorded_attempts(node["unrecorded_attempts"],
                                                          1 if node["state"] == "interrupted" else 0, status)
    unprobed = not_probed(facts, row["dir_path"], elsewhere) if status in (RUNNING, PLANNING) else None
    summary = run_summary(row, status, row["label"], left_running, facts, unprobed)
    for item in [*nodes, *rounds, *charges]:
        for key in list(item):
            if key.endswith("_nano_usd"):
                item[key[: -len("_nano_usd")] + "_usd"] = _money(item[key])
    for item in [*legs, *nodes, *rounds, *charges, *findings, *goal, *problems]:
        item.pop("run_pk", None)
    m = row
    summary.update({
        "dir_path": m["dir_path"],
        # The tables below are the last sync's; the status above was checked against the stream now.
        "stream_changed_since_sync": stream_changed_since_sync(m["dir_path"], checkpoint) if elsewhere is None else None,
        # Bytes after its last complete line when the last sync read it: a line still being
        # written, or one cut from its newline (which the status reads once the lock is free).
        "unindexed_tail_at": checkpoint.end_offset if bytes_after_last_line(checkpoint) else None,
        "billed": bool(m["billed"]),
        "copies_in": copies,
        "graph_source_path": m["graph_source_path"],
        "inputs": orjson.loads(m["inputs_json"]) if m["inputs_json"] else None,
        "continue_on_fail": m["continue_on_fail"],
        "build_evidence": None if m["build_evidence_answer"] is None else {
            "answer": m["build_evidence_answer"], "declared_by": m["build_evidence_declared_by"],
            "signals": orjson.loads(m["build_evidence_signals_json"]) if m["build_evidence_signals_json"] else [],
        },
        "gate_paused_at": m["gate_paused_at"],
        "planning_cost_usd": _money(m["planning_cost_nano_usd"]),
        "planning_cost_unknown": m["planning_cost_unknown"],
        "snapshot_cost_usd": _money(m["snapshot_cost_nano_usd"]),
        "files": {"events.jsonl": m["has_events"], "state.json": m["has_state"], "graph.json": m["has_graph_json"],
                  "rejected.json": m["has_rejected"], "assess.json": m["has_assess"], "resume.lock": m["has_lock"]},
        "legs": legs,
        "nodes": nodes,
        "rounds": rounds,
        "charges": charges,
        "findings": findings,
        "goal_cycle": goal[0] if goal else None,
        "problems": problems,
    })
    return summary
