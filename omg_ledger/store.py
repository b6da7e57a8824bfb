"""The ledger's reads and writes for sync and rebuild: facts, derived rows, checkpoints.

Everything one run contributes — its new facts (events, JSON files, directory facts,
stream checkpoint) and the rows derived from them — is written by :func:`write_run`
inside the caller's single transaction, so a sync killed at any instant leaves either
the old or the new state of that run, never a mix. :func:`load_run_facts` reads back
exactly what derivation needs, so a run is re-derived without its home.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import itertools
import operator
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import orjson
from sqlalchemy import TEXT, and_, func, literal, or_, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Engine

from . import schema
from .backend import backend_of
from .bounds import bounded_path, bounded_reason, no_nul
from .derive import STREAM_LESS, RunFacts
from .errors import HomeConflict
from .feed import Event, stored_fields
from .reconcile import FinishedRows, RunRows, live_rows
from .tail import Checkpoint
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
    return {k: no_nul(v) for k, v in row.items()}


def upsert(conn: Connection, table, values: dict, keys: Sequence[str], update_columns: Iterable[str]) -> None:
    backend_of(conn).upsert(conn, table, values, keys, update_columns)


def resolve_home(conn: Connection, label: str, path: str, explicit: bool, identity: dict,
                 relabel: bool = False, moves: list[dict] | None = None) -> int:
    """The home a directory is, by its real identity (``identity``: discover.home_identity —
    machine, device, inode, resolved path), not by the label or path it is named with
    (caller's write transaction).

    The same directory named through a symlink, without its label or after a hostname
    change is the same home. Naming it with another label, or giving a label that
    holds another directory, is refused (HomeConflict) — unless ``relabel`` says to
    point that label at this directory. A home found under another path than it was
    synced at has what the ledger holds renamed to this one (relocate_home), and the move
    is appended to ``moves`` ({home, from, to}).
    """
    homes = schema.homes
    machine, dev, inode, real = identity["machine"], identity["dev"], identity["inode"], identity["real_path"]
    columns = (homes.c.id, homes.c.label, homes.c.path, homes.c.machine, homes.c.dev, homes.c.inode,
               homes.c.real_path)
    found = None
    if dev is not None:
        found = conn.execute(select(*columns).where(
            homes.c.machine == machine, homes.c.dev == dev, homes.c.inode == inode)).first()
        if found is None and machine.startswith("host:"):
            # No machine id here (a container, say): the hostname may change with every
            # start, so the directory itself is the identity.
            found = conn.execute(select(*columns).where(
                homes.c.machine.startswith("host:"), homes.c.dev == dev, homes.c.inode == inode,
                homes.c.real_path == real)).first()
    if found is None:
        found = conn.execute(select(*columns).where(homes.c.machine == machine, homes.c.real_path == real)).first()
    by_label = conn.execute(select(*columns).where(homes.c.label == label)).first()
    if found is not None:
        if explicit and found.label != label:
            if by_label is None and relabel:
                conn.execute(homes.update().where(homes.c.id == found.id).values(label=label))
            else:
                raise HomeConflict(
                    f"{path} is already indexed as home {found.label!r}; sync it as --home {found.label}={path}, "
                    f"or rename that home with `omg-ledger homes rename {found.label} {label}`")
        if (found.path, found.machine, found.dev, found.inode, found.real_path) != (path, machine, dev, inode, real):
            conn.execute(homes.update().where(homes.c.id == found.id).values(path=path, **identity))
        if found.path != path:
            relocate_home(conn, found.id, found.path, path)
            if moves is not None:
                moves.append({"home": label if explicit else found.label, "from": found.path, "to": path})
        return found.id
    if by_label is not None:
        unknown = by_label.real_path is None  # recorded before homes had identities
        elsewhere = not unknown and by_label.machine is not None and by_label.machine != machine
        if elsewhere and not explicit:
            # Another machine of the same hostname has a home at this path: this machine's
            # is another home (taking that one over would mark its runs gone, and that
            # machine's next sync would take it back).
            label = _label_on_this_machine(conn, label, machine)
        else:
            if not unknown and explicit and not relabel:
                raise HomeConflict(
                    f"home {label!r} is {by_label.path} on another machine ({by_label.machine}); give this "
                    f"machine's home a label of its own (--home LABEL={path}), or sync with --relabel to point "
                    f"{label!r} here (its runs on that machine are then marked gone)" if elsewhere else
                    f"home {label!r} is {by_label.path}, not {path}; to point the label at {path} (its runs "
                    f"under {by_label.path} are then marked gone), sync with --relabel")
            conn.execute(homes.update().where(homes.c.id == by_label.id).values(path=path, **identity))
            return by_label.id
    return conn.execute(homes.insert().values(label=label, path=path, **identity)).inserted_primary_key[0]


def _label_on_this_machine(conn: Connection, label: str, machine: str) -> str:
    """The default label ``<hostname>:<path>`` of a home on ``machine`` when another
    machine's home has it: ``<hostname>#<machine id's first 8 characters>:<path>`` (the
    whole machine id in the unlikely case that is taken too)."""
    hostname, _, rest = label.partition(":")
    machine_id = machine.partition(":")[2] or machine
    for tag in (machine_id[:8], machine_id):
        candidate = f"{hostname}#{tag}:{rest}"
        if conn.execute(select(schema.homes.c.id).where(schema.homes.c.label == candidate)).first() is None:
            return candidate
    raise HomeConflict(f"home {label!r} is on another machine, and so is {candidate!r}: give this machine's home "
                       f"a label of its own (--home LABEL=DIR)")


def relocate_home(conn: Connection, home_id: int, old: str, new: str) -> None:
    """What the ledger holds under a home's old path, renamed to its new one: the same
    directory (its identity says so) is named another way now (renamed, or reached
    through a symlink or without it), so its runs, their streams and problems are where
    they were, under another name. Renaming them here costs a few statements; finding
    each run at another path would read every run again (caller's write transaction)."""
    old_prefix, new_prefix = old.rstrip("/") + "/", new.rstrip("/") + "/"
    if old_prefix == new_prefix:
        return
    cut = len(old_prefix)

    def under(column):
        return func.substr(column, 1, cut) == old_prefix

    def renamed(column):
        return literal(new_prefix, TEXT) + func.substr(column, cut + 1)

    runs, streams, problems = schema.runs, schema.streams, schema.problems
    conn.execute(update(runs).where(runs.c.home_id == home_id, under(runs.c.dir_path))
                 .values(dir_path=renamed(runs.c.dir_path)))
    conn.execute(update(streams).where(streams.c.kind == "run", streams.c.source == f"home:{home_id}",
                                       under(streams.c.path)).values(path=renamed(streams.c.path)))
    its_runs = select(runs.c.id).where(runs.c.home_id == home_id)
    machine = conn.execute(select(schema.homes.c.machine).where(schema.homes.c.id == home_id)).scalar() or ""
    # A problem of no run under the old path is this home's unless another home of this
    # machine is there now. Another machine's home there has problems of its own: then only
    # those this machine recorded are this home's ('', of no recorded machine, may be either's).
    homes = schema.homes
    there = select(homes.c.id).where(homes.c.id != home_id, or_(*(under(column + "/") for column in (
        homes.c.path, homes.c.real_path))))
    whose = problems.c.run_pk.in_(its_runs)
    if conn.execute(there.where(homes.c.machine == machine)).first() is None:
        elsewhere = conn.execute(there.where(homes.c.machine != machine)).first() is not None
        mine = problems.c.machine == machine if elsewhere else machine_problems(problems.c.machine, machine)
        whose = or_(whose, and_(problems.c.run_pk.is_(None), mine))
    moving = conn.execute(select(problems).where(under(problems.c.path), whose)).all()
    for problem in moving:
        path = bounded_path(new_prefix + problem.path[cut:])
        twin = conn.execute(select(problems).where(
            machine_problems(problems.c.machine, machine), problems.c.path == path,
            problems.c.byte_offset == problem.byte_offset, problems.c.reason == problem.reason)).first()
        if twin is None:
            conn.execute(update(problems).where(problems.c.id == problem.id).values(path=path, machine=machine))
            continue
        # Recorded at the new path before (the home was named so once): one problem.
        conn.execute(update(problems).where(problems.c.id == twin.id).values(
            machine=machine, first_seen_at=min(twin.first_seen_at, problem.first_seen_at),
            last_seen_at=max(twin.last_seen_at, problem.last_seen_at),
            resolved_at=None if problem.resolved_at is None or twin.resolved_at is None
            else max(twin.resolved_at, problem.resolved_at)))
        conn.execute(problems.delete().where(problems.c.id == problem.id))


def settle_copies(conn: Connection, identities: Iterable[str | None]) -> None:
    """Which copy of a run is billed (caller's write transaction, after its rows).

    Copies share a stream identity. The one holding most of the stream is billed, then
    the one whose last line is latest, then the one holding an assess.json (written after the run's last line: a backup taken
    before it has the same stream, and the assessment's spend is recorded nowhere else),
    then the one still on disk, then the first seen; a copy whose stream is not a
    prefix of the billed one's diverged after their common head: a finding on it.
    A copy with no line of its stream, or whose stream does not begin with its first line
    (its head damaged; either's identity is '<run id>:no-stream'), is a copy of the run
    with that id that has one: settled with it, it is billed only where it holds more of
    the stream (a copy with no line never does). Two runs of one id (two first lines):
    which one such a copy copies is not known, and it is never billed beside them.
    """
    runs, homes = schema.runs, schema.homes
    backend = backend_of(conn)
    wanted = _with_stream_less_kin(conn, {i for i in identities if i is not None})
    backend.lock_identities(conn, wanted)  # all at once, in one order: no two writers deadlock
    for chunk in _chunks_by_run_id(wanted):
        by_identity: dict[str, list] = {}
        for member in conn.execute(
                select(runs.c.id, runs.c.event_count, runs.c.last_event_at_us, runs.c.has_assess, runs.c.gone,
                       runs.c.billed,
                       homes.c.label, runs.c.stream_identity)
                .select_from(runs.join(homes, homes.c.id == runs.c.home_id))
                .where(runs.c.stream_identity.in_(chunk))):
            by_identity.setdefault(member.stream_identity, []).append(member)
        # (A stream-less identity's streamed kin are in its chunk: a run id's identities are.)
        streamed = collections.Counter(
            _run_id_of(i) for i in by_identity if not i.endswith(STREAM_LESS))
        billed_now: list[tuple] = []
        copies = []
        alone = []  # members compared with no billed copy: no diverged_copy of theirs stands
        for identity in chunk:
            members = by_identity.get(identity)
            if not members:
                continue
            run_id = _run_id_of(identity)
            if identity.endswith(STREAM_LESS) and streamed[run_id]:
                if streamed[run_id] == 1:
                    continue  # settled with its run's one streamed identity
                billed = None  # which of two runs it copies is not known: never a second bill
            else:
                if streamed[run_id] == 1:
                    members = members + by_identity.get(run_id + STREAM_LESS, [])
                billed = max(members, key=_billing_order)
            billed_now += [(billed is not None and m.id == billed.id, m.id) for m in members
                           if bool(m.billed) != (billed is not None and m.id == billed.id)]
            if len(members) > 1 and billed is not None:
                copies.append((members, billed))
            else:
                alone += [m.id for m in members]
        if billed_now:
            conn.exec_driver_sql(f"UPDATE runs SET billed = {backend.mark} WHERE id = {backend.mark}", billed_now)
        if alone:
            # (The billed copy it diverged from is forgotten, or another run of its id came.)
            conn.execute(schema.findings.delete().where(schema.findings.c.run_pk.in_(alone),
                                                        schema.findings.c.kind == "diverged_copy"))
        for members, billed in copies:
            _diverged_copies(conn, members, billed)


def _billing_order(member) -> tuple:
    """Which copy of a run is billed: the one holding most of the stream; of copies holding
    as many lines, the one whose last line is latest (a copy whose damaged head cost it
    lines the other lacks at its end reaches further, whichever was seen first); then the
    one holding an assess.json, the one still on disk, the first seen."""
    last = member.last_event_at_us
    return (member.event_count, -1 if last is None else last, bool(member.has_assess), not member.gone, -member.id)


def _run_id_of(identity: str) -> str:
    return identity.rsplit(":", 1)[0]  # (the hash and 'no-stream' hold no ':')


def _chunks_by_run_id(identities: list[str]) -> Iterator[list[str]]:
    """Sorted identities about SETTLE_CHUNK at a time, a run id's never split (they are
    adjacent when sorted: each is '<run id>:' and a hash or 'no-stream')."""
    chunk: list[str] = []
    for identity in identities:
        if len(chunk) >= SETTLE_CHUNK and _run_id_of(identity) != _run_id_of(chunk[-1]):
            yield chunk
            chunk = []
        chunk.append(identity)
    if chunk:
        yield chunk


def _with_stream_less_kin(conn: Connection, identities: set[str]) -> list[str]:
    """``identities`` with the other identities of the same run ids that decide one of
    them: a streamed one's stream-less copies, and every streamed run of a run id that
    has such copies (one streamed run or two decides whether they may be billed). Sorted,
    so a stream-less identity comes right after its run id's streamed ones."""
    r = schema.runs.c
    kin = set(identities)
    stream_less = sorted({_run_id_of(i) + STREAM_LESS for i in identities if not i.endswith(STREAM_LESS)})
    for start in range(0, len(stream_less), SETTLE_CHUNK):
        kin.update(conn.execute(select(r.stream_identity).distinct().where(
            r.stream_identity.in_(stream_less[start:start + SETTLE_CHUNK]))).scalars())
    for identity in list(kin):  # (the stream-less copies just found too)
        if identity.endswith(STREAM_LESS):
            run_id = _run_id_of(identity)
            # The run id's identities, by their index: '<run id>:' up to (not with) '<run id>;'.
            kin.update(i for i in conn.execute(select(r.stream_identity).distinct().where(
                r.stream_identity >= run_id + ":", r.stream_identity < run_id + ";")).scalars()
                if _run_id_of(i) == run_id)
    return sorted(kin)


SETTLE_CHUNK = 500  # identities settled per query (a batch of a cold sync: one or two queries)


def _diverged_copies(conn: Connection, members: list, billed) -> None:
    """Findings on the copies of one run whose stream is not a prefix of the billed one's."""
    findings = schema.findings
    pks = [m.id for m in members]
    conn.execute(findings.delete().where(findings.c.run_pk.in_(pks), findings.c.kind == "diverged_copy"))
    for member in members:
        if member.id == billed.id:
            continue
        at = _first_difference(conn, member.id, billed.id)
        if at is None:
            continue
        seq = (conn.execute(select(func.max(findings.c.seq)).where(findings.c.run_pk == member.id)).scalar()
               or 0) + 1
        conn.execute(findings.insert().values(
            run_pk=member.id, seq=seq, kind="diverged_copy", node_id=None, leg_ordinal=None,
            detail=no_nul(f"this copy (home {member.label}) and the billed copy (home {billed.label}) share "
                           f"their first line but differ from stream line {at}: not counted twice; "
                           f"the billed copy holds {billed.event_count} events, this one {member.event_count}")))


def _raw_lines(conn: Connection, run_pk: int) -> Iterator[tuple[int, str, int]]:
    """A run's stored lines in file order, with their line numbers and byte offsets, a
    page at a time."""
    mark = backend_of(conn).mark
    statement = (f"SELECT line_no, raw, byte_offset FROM events WHERE run_pk = {mark} AND line_no > {mark} "
                 f"ORDER BY line_no LIMIT {EVENT_PAGE}")
    last = 0
    while True:
        rows = conn.exec_driver_sql(statement, (run_pk, last)).fetchall()
        yield from rows
        if len(rows) < EVENT_PAGE:
            return
        last = rows[-1][0]


def _first_difference(conn: Connection, copy_pk: int, billed_pk: int) -> int | None:
    """Where a copy's stream stops being a prefix of the billed copy's (the copy's line
    number of its first stored line that differs, or of its first line past the billed
    stream's end), or None when it is a prefix. Both are read page by page, side by side;
    lines neither stored (blank or bad ones) are no difference. Where one copy's stream
    does not begin with its first line (its head damaged), the other's is read from the
    line equal to that copy's first stored one: the damage is the damaged copy's problem,
    not a difference (both damaged: the one whose first stored line comes later)."""
    reference, mine = _raw_lines(conn, billed_pk), _raw_lines(conn, copy_pk)
    ours, theirs = next(mine, None), next(reference, None)
    if ours is not None and theirs is not None and ours[1] != theirs[1]:
        head = ours[0]
        aligned = None
        if ours[2] > 0:  # the copy's head damaged: the billed stream from the copy's first line
            rest = _raw_lines(conn, billed_pk)
            aligned = next((line for line in rest if line[1] == ours[1]), None)
            if aligned is not None:
                reference, theirs = rest, aligned
        if aligned is None and theirs[2] > 0:  # the billed copy's: the copy from its first line
            ours = next((line for line in mine if line[1] == theirs[1]), None)
            if ours is None:
                return head
    while ours is not None:
        if theirs is None or ours[1] != theirs[1]:
            return ours[0]
        ours, theirs = next(mine, None), next(reference, None)
    return None


# Rows per query when a run's events are streamed back: a line is at most 1 MiB, so
# a page holds at most this many MiB, whatever the run's size.
EVENT_PAGE = 128
# New lines are written in batches of at most this many rows or bytes.
EVENT_BATCH_ROWS = 2000
EVENT_BATCH_BYTES = 8 << 20


def iter_events(conn: Connection, run_pk: int, after_line: int = 0) -> Iterator[Event]:
    """The run's stored events after line ``after_line``, re-parsed from their original
    lines, in file order, a page at a time (never the whole run in memory)."""
    mark = backend_of(conn).mark
    statement = (f"SELECT line_no, byte_offset, raw FROM events WHERE run_pk = {mark} AND line_no > {mark} "
                 f"ORDER BY line_no LIMIT {EVENT_PAGE}")
    last = after_line
    while True:
        rows = fetch_rows(conn, statement, (run_pk, last))
        for line_no, byte_offset, raw in rows:
            data = stored_fields(raw)
            if data is None:
                continue  # stored by an older omg-ledger, refused by this one
            ts, at_us = parse_timestamp(data["ts"], strict=False)  # accepted when it was stored
            yield Event(line_no, byte_offset, data, raw, ts, at_us)
        if len(rows) < EVENT_PAGE:
            return
        last = rows[-1][0]
        del rows


def terminal_keys(conn: Connection, run_pk: int, node_id: str,
                  pending: PendingRows | None = None) -> Iterator[tuple[str, int, str | None]]:
    """(verdict, round, session_id) of each stored terminal event of one node, in file
    order, a page at a time (derivation's lookup for terminals it no longer holds).
    ``pending``: lines held back there are flushed first, so the table holds them."""
    if pending is not None:
        pending.flush(conn)
    mark = backend_of(conn).mark
    statement = (f"SELECT line_no, raw FROM events WHERE run_pk = {mark} AND node_id = {mark} "
                 f"AND event IN ('node_passed', 'node_failed') AND line_no > {mark} ORDER BY line_no "
                 f"LIMIT {EVENT_PAGE}")
    # The column holds the id with NUL as U+FFFD (_event_tuple): ids that differ only
    # there share its value, and the line itself says whose terminal it is.
    last = 0
    while True:
        rows = fetch_rows(conn, statement, (run_pk, no_nul(node_id), last))
        for _, raw in rows:
            data = stored_fields(raw)
            if data is None or data.get("node_id") != node_id:
                continue
            yield ("PASS" if data["event"] == "node_passed" else "FAIL", int(data.get("round") or 0),
                   data.get("session_id"))
        if len(rows) < EVENT_PAGE:
            return
        last = rows[-1][0]


def _batches(events: Iterable[Event]) -> Iterator[list[Event]]:
    batch: list[Event] = []
    size = 0
    for event in events:
        batch.append(event)
        size += len(event.raw)
        if len(batch) >= EVENT_BATCH_ROWS or size >= EVENT_BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def create_run(conn: Connection, home_id: int, run_id: str, dir_facts: dict) -> tuple[int, bool]:
    """(key, created) of a run about to be written (caller's transaction): a run the
    ledger has never seen gets its row first, so its lines can be stored as they are
    read; ``write_run`` then fills in the derived columns."""
    sql = _statements(conn)
    values = {**dir_facts, "home_id": home_id, "run_id": run_id}
    run_pk = conn.exec_driver_sql(sql.insert_run(), _scrub(sql.row("runs", values))).scalar()
    if run_pk is not None:
        return run_pk, True
    return conn.execute(select(schema.runs.c.id).where(
        schema.runs.c.home_id == home_id, schema.runs.c.run_id == run_id)).scalar_one(), False


def next_run_pk(conn: Connection) -> int | None:
    """The key the next new run gets, when this writer may assign run keys itself
    (SQLite: the write transaction holds the database's one write lock, so nobody else
    inserts a run meanwhile), or None (PostgreSQL: :func:`create_run` asks the database).
    From here on the batch's foreign keys are checked at its commit, since a new run's
    row is then written with its children (write_run's ``insert_row``), after them."""
    return backend_of(conn).next_run_pk(conn)


def store_while_reading(conn: Connection, run_pk: int, events: Iterable[Event],
                        pending: PendingRows | None = None) -> Iterator[Event]:
    """A new run's lines, stored a batch at a time as they pass (caller's transaction):
    derivation walks them as they are read, with no second read from the table.
    ``pending``: the lines are held back there (flushed when it is full) instead of
    inserted at once; a reader of the table in between flushes it first."""
    own = pending is None
    if pending is None:
        pending = PendingRows()
    for batch in _batches(events):
        _add_events(conn, pending, run_pk, batch)
        if own:
            pending.flush(conn)
        yield from batch


def write_events(conn: Connection, run_pk: int, events: Iterable[Event], replace: bool,
                 created: bool = False, pending: PendingRows | None = None) -> tuple[bool, int]:
    """Store a run's new lines as they are read, a batch at a time (caller's
    transaction, so the run stays all-or-nothing). Returns (changed, count).

    ``replace``: the file was read from zero; its lines replace the stored ones. Each
    batch is compared with the stored lines of the same range first, so a stream
    re-read with the same bytes (a copy renamed over it) changes nothing. ``pending``:
    the new lines are held back there; the caller flushes it before the run's lines are
    read back (iter_events).
    """
    own = pending is None
    if pending is None:
        pending = PendingRows()
    mark = backend_of(conn).mark
    changed, count, last = False, 0, 0
    replace = replace and not created
    if not created:
        backend_of(conn).lock_run(conn, run_pk)
    for batch in _batches(events):
        count += len(batch)
        if replace:
            high = batch[-1].line_no
            stored = conn.exec_driver_sql(
                f"SELECT line_no, byte_offset, raw FROM events WHERE run_pk = {mark} AND line_no > {mark} "
                f"AND line_no <= {mark} ORDER BY line_no", (run_pk, last, high)).fetchall()
            if [tuple(r) for r in stored] != [(e.line_no, e.byte_offset, e.raw) for e in batch]:
                changed = True
                conn.exec_driver_sql(f"DELETE FROM events WHERE run_pk = {mark} AND line_no > {mark} "
                                     f"AND line_no <= {mark}", (run_pk, last, high))
                _add_events(conn, pending, run_pk, batch)
            last = high
        else:
            changed = True
            _add_events(conn, pending, run_pk, batch)
    if replace:
        left = conn.exec_driver_sql(f"DELETE FROM events WHERE run_pk = {mark} AND line_no > {mark}", (run_pk, last))
        changed = changed or bool(left.rowcount)
    if own:
        pending.flush(conn)
    return changed, count


def _add_events(conn: Connection, pending: PendingRows, run_pk: int, batch: list[Event]) -> None:
    pending.add("events", [_event_tuple(run_pk, e) for e in batch], sum(len(e.raw) for e in batch))
    pending.spill(conn)


class _Statements:
    """Driver-level SQL for the hot path, built once per dialect.

    A cold sync writes ~15 statements per run; building each one through SQLAlchemy's
    expression layer cost more than SQLite's own work. These are plain parameterised
    statements (never values pasted into text), executed with tuples.
    """

    def __init__(self, backend) -> None:
        self.mark = backend.mark
        # A surrogate `id` is the database's to assign: never in an insert.
        self.columns = {t.name: [c.name for c in t.columns if not (c.name == "id" and c.autoincrement is True)]
                        for t in schema.metadata.sorted_tables}
        self.defaults = {
            t.name: {c.name: c.default.arg for c in t.columns if c.default is not None and c.default.is_scalar}
            for t in schema.metadata.sorted_tables
        }
        # Every column with its default, so a row is one dict merge and one C-level
        # itemgetter call, not a Python loop per column.
        self._base = {t: {c: self.defaults[t].get(c) for c in cols} for t, cols in self.columns.items()}
        self._getters = {t: operator.itemgetter(*cols) for t, cols in self.columns.items()}
        self._cache: dict[tuple, str] = {}
        # Derived rows (reconcile's legs, rounds, findings: attributes named as the
        # columns; nodes, goal cycles: dicts keyed so) become tuples in one C-level call
        # each, after the run_pk every one of them starts with.
        self._attributes = {t: operator.attrgetter(*self.columns[t][1:]) for t in ("legs", "rounds", "findings")}
        self._keys = {t: operator.itemgetter(*self.columns[t][1:]) for t in ("nodes", "goal_cycles")}
        charges = self.columns["charges"]
        tokens = charges.index("input_tokens")
        self._charge_head = operator.attrgetter(*charges[1:tokens])
        self._charge_tail = operator.attrgetter(*charges[tokens + len(CHARGE_TOKEN_COLUMNS):])
        # Rows built as tuples without a dict rely on the schema's column order.
        assert tuple(charges[tokens:tokens + len(CHARGE_TOKEN_COLUMNS)]) == CHARGE_TOKEN_COLUMNS, charges
        assert all(self.columns[t][0] == "run_pk" for t in (*self._attributes, *self._keys, "charges"))
        assert tuple(self.columns["events"]) == EVENT_COLUMNS, self.columns["events"]
        assert tuple(self.columns["run_files"]) == RUN_FILE_COLUMNS, self.columns["run_files"]

    def insert(self, table: str) -> str:
        key = ("insert", table)
        if key not in self._cache:
            cols = self.columns[table]
            self._cache[key] = (f"INSERT INTO {table} ({', '.join(cols)}) "
                                f"VALUES ({', '.join([self.mark] * len(cols))})")
        return self._cache[key]

    def insert_with_id(self, table: str) -> str:
        """The insert of rows whose surrogate id is given first (store.next_run_pk)."""
        key = ("insert_with_id", table)
        if key not in self._cache:
            cols = ["id", *self.columns[table]]
            self._cache[key] = (f"INSERT INTO {table} ({', '.join(cols)}) "
                                f"VALUES ({', '.join([self.mark] * len(cols))})")
        return self._cache[key]

    def row(self, table: str, values: dict) -> tuple:
        try:
            return self._getters[table](values)  # every column given (derived rows): no merge
        except KeyError:
            return self._getters[table]({**self._base[table], **values})

    def object_rows(self, table: str, run_pk: int, items: Iterable) -> Iterator[tuple]:
        get = self._attributes[table]
        return ((run_pk, *get(item)) for item in items)

    def dict_rows(self, table: str, run_pk: int, items: Iterable[dict]) -> Iterator[tuple]:
        get = self._keys[table]
        for item in items:
            try:
                yield (run_pk, *get(item))
            except KeyError:  # a column left to its default
                yield self.row(table, {**item, "run_pk": run_pk})

    def charge_rows(self, run_pk: int, charges: Iterable) -> Iterator[tuple]:
        """Charges' rows: a charge's ``tokens`` (input, cached input, output, reasoning)
        fill CHARGE_TOKEN_COLUMNS."""
        head, tail = self._charge_head, self._charge_tail
        return ((run_pk, *head(c), *c.tokens, *tail(c)) for c in charges)

    def insert_run(self) -> str:
        key = ("insert_run",)
        if key not in self._cache:
            cols = self.columns["runs"]
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
    backend = backend_of(conn)
    if backend.name not in _STATEMENTS:
        _STATEMENTS[backend.name] = _Statements(backend)
    return _STATEMENTS[backend.name]


def _scrub(row: tuple) -> tuple:
    return tuple(no_nul(v) for v in row)


def executemany(conn: Connection, statement: str, rows: list[tuple]) -> None:
    """``statement`` once per row, on the DB-API cursor of ``conn``'s connection (in its
    open transaction). Going past SQLAlchemy's execution context saves ~15% of a cold
    sync's inserts; a driver error is still raised as SQLAlchemy's (OperationalError…),
    which is what callers catch."""
    with _dbapi_cursor(conn, statement, rows[:1], many=True) as cursor:
        cursor.executemany(statement, rows)


def fetch_rows(conn: Connection, statement: str, params: tuple) -> list[tuple]:
    """The rows of one query, as tuples, on the DB-API cursor of ``conn``'s connection
    (in its open transaction, which the caller has begun). For the per-run reads of a
    derivation: SQLAlchemy's execution context cost more than SQLite's own work there
    (a rebuild of 10,000 runs took 0.73x the time without it)."""
    with _dbapi_cursor(conn, statement, params) as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall()


@contextlib.contextmanager
def _dbapi_cursor(conn: Connection, statement: str, params, many: bool = False) -> Iterator:
    dbapi = conn.dialect.loaded_dbapi
    try:
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()
    except dbapi.Error as exc:
        raise sa_exc.DBAPIError.instance(statement, params, exc, dbapi.Error, dialect=conn.dialect,
                                         ismulti=many) from exc


# sqlite3 binds exact ints, floats and strs directly, and looks anything else up among
# its adapters, failing through two attribute lookups: ~0.45 µs a value, 4-5x an int.
# A cold sync binds ~0.8M NULLs and ~1.4M booleans. Registered, each is one C call
# giving what sqlite3 would have bound anyway (NULL; a bool as its int).
sqlite3.register_adapter(type(None), {}.get)
sqlite3.register_adapter(bool, int)

# What PendingRows holds back at most before it writes out (inside the open
# transaction): this, not a run's size, bounds a write's memory.
HELD_BACK_ROWS = 50_000
HELD_BACK_BYTES = 16 << 20  # of events' raw lines (a line may be up to 1 MiB)


class PendingRows:
    """Inserts held back until the end of a sync batch, then one ``executemany`` per
    table (in the order tables first appear, which is foreign-key order: a run's row is
    inserted at once, its children here). Statement overhead is then per batch, not per
    run. When more than HELD_BACK_ROWS rows or HELD_BACK_BYTES of lines are held,
    ``spill`` writes them out in the same transaction (a huge run's rows are written
    while its walk goes on). The caller flushes before anything reads the tables back
    (settle_copies, iter_events, terminal_keys read events) and before its commit."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple]] = {}
        self.count = 0  # rows held now
        self.size = 0  # bytes of lines held now
        self.written = 0  # rows flushed since ``restart``

    def add(self, table: str, rows: list[tuple], size: int = 0) -> None:
        if rows:
            self.rows.setdefault(table, []).extend(rows)
            self.count += len(rows)
            self.size += size

    @property
    def batch_rows(self) -> int:
        """Rows added since ``restart``, written out or held."""
        return self.written + self.count

    def spill(self, conn: Connection) -> None:
        if self.count >= HELD_BACK_ROWS or self.size >= HELD_BACK_BYTES:
            self.flush(conn)

    def flush(self, conn: Connection) -> None:
        # New runs' rows (write_run's insert_row) before their children.
        with backend_of(conn).pipelined(conn):
            insert_rows(conn, "runs", self.rows.pop("runs", None))
            for table, rows in self.rows.items():
                insert_rows(conn, table, rows)
        self.rows.clear()
        self.written += self.count
        self.count = 0
        self.size = 0

    def drop_run(self, conn: Connection, run_pk: int) -> None:
        """Forget the rows held for one run (one that is not stored after all)."""
        columns = work_tables(conn)
        for table, rows in self.rows.items():
            at = columns[table].index("id" if table == "runs" else "run_pk")
            kept = [row for row in rows if row[at] != run_pk]
            self.count -= len(rows) - len(kept)
            rows[:] = kept

    def restart(self) -> None:
        """A new batch begins (after a commit or a rollback): nothing held, none written."""
        self.rows.clear()
        self.count = self.size = self.written = 0


class RowsOnly:
    """Where a pool worker "writes" a new run: no database, only the dialect the rows
    are for. With a CollectedRows, the write functions of a new run (write_events,
    write_run with insert_row, save_derive_state, all ``fresh``) only add rows; any
    statement they would run instead is a mistake, and says so."""

    def __init__(self, dialect_name: str) -> None:
        self.dialect_name = dialect_name

    def exec_driver_sql(self, statement: str, *args) -> None:
        raise RuntimeError(f"a new run's rows were to be collected, not written: {statement.split()[:3]}")


class CollectedRows(PendingRows):
    """A PendingRows that never writes out: every row of one new run, for a pool
    worker's work file (workfile.py)."""

    def spill(self, conn) -> None:
        pass


def delete_new_run(conn: Connection, run_pk: int) -> None:
    """Delete what was written of a run this transaction created, children first (a
    run's children may be written before its row: SQLite's deferred foreign keys)."""
    mark = backend_of(conn).mark
    for table, columns in work_tables(conn).items():
        if "run_pk" in columns and table != "problems":
            conn.exec_driver_sql(f"DELETE FROM {table} WHERE run_pk = {mark}", (run_pk,))
    conn.exec_driver_sql(f"DELETE FROM runs WHERE id = {mark}", (run_pk,))


def insert_rows(conn: Connection, table: str, rows: list[tuple] | None) -> None:
    """Rows as PendingRows holds them (a new run's row: its id first), one executemany."""
    if rows:
        sql = _statements(conn)
        executemany(conn, sql.insert_with_id(table) if table == "runs" else sql.insert(table), rows)


def work_tables(conn: Connection | Engine) -> dict[str, list[str]]:
    """Each table's columns in the order PendingRows holds its rows (a new run's row:
    its id first), in foreign-key order: a pool worker's work file has these tables."""
    columns = _statements(conn).columns
    return {t: (["id", *cols] if t == "runs" else list(cols)) for t, cols in columns.items()}


def row_of(conn: Connection, table: str, values: dict) -> tuple:
    """One row of ``table`` as the hot path inserts it (columns in order, defaults filled in)."""
    return _statements(conn).row(table, values)


@dataclass
class RunWrite:
    """The new facts of one run directory, as ingest read them."""

    dir_facts: dict  # dir_path, gone, has_* , stream_paused: columns of `runs`
    stream: tuple[str, str, Checkpoint] | None  # (source, path, checkpoint); None: keep the stored one
    dir_cache: dict  # ingest_state columns
    snapshot_files: dict[str, dict | None]  # changed files only: name -> row (None: gone)
    run_files: set[tuple[str, str]] | None  # (place, name) of every '*.out'; None: unchanged


def write_run(conn: Connection, run_pk: int, home_id: int, run_id: str, facts: RunWrite,
              rows: RunRows, version: int, scrub: bool = False, created: bool = False,
              pending: PendingRows | None = None, insert_row: bool = False) -> int:
    """Store one run's new facts and its derived rows (caller's transaction), the
    caller having cleared the old derived rows (clear_derived) and written the finished
    ones while deriving, so only ``rows`` are inserted; a run's lines are stored as
    they are read, never here. ``scrub`` (some text of this run holds a NUL, which
    PostgreSQL cannot store) turns NUL into U+FFFD in derived text on every backend, so
    the two agree; events.raw keeps the exact escape. ``created``: ``run_pk`` was made
    by :func:`create_run` in this transaction (it has no old rows), or (``insert_row``)
    given by :func:`next_run_pk`, the run's row not written yet: it is then held back in
    ``pending`` whole, one insert and no update. ``pending``: the child rows are
    added to it (the caller flushes it inside this transaction) instead of inserted at
    once. Returns the run's key.
    """
    sql = _statements(conn)
    own = pending is None
    if pending is None:
        pending = PendingRows()
    run_values = {**rows.run, **facts.dir_facts, "derivation_version": version}
    fix = _scrub if scrub else _same
    if insert_row:
        # Scrubbed whatever ``scrub`` says, as create_run's row was: without a NUL
        # (scrub False) that changes nothing.
        pending.add("runs", [(run_pk, *_scrub(sql.row("runs", {**run_values, "home_id": home_id, "run_id": run_id})))])
    elif created:
        _update_run(conn, sql, run_pk, run_values, fix)
    else:
        backend_of(conn).lock_run(conn, run_pk)
        _update_run(conn, sql, run_pk, run_values, fix)
    _insert_derived(conn, pending, sql, run_pk, rows, fix)
    write_identities(conn, run_pk, facts, created, pending)
    if facts.run_files is not None:
        if not created:
            conn.exec_driver_sql(sql.delete_run_rows("run_files"), (run_pk,))
        pending.add("run_files", [(run_pk, place, name) for place, name in sorted(facts.run_files)])
    if own:
        pending.flush(conn)
    return run_pk


def write_identities(conn: Connection, run_pk: int, facts: RunWrite, fresh: bool = False,
                     pending: PendingRows | None = None) -> None:
    """What the next change check compares: the stream's checkpoint, the directory's
    mtime cache and the JSON files' rows (alone when only identities changed, e.g. a
    state.json renamed over with the same bytes; with the run's rows otherwise)."""
    sql = _statements(conn)
    own = pending is None
    if pending is None:
        pending = PendingRows()
    if facts.stream is not None:
        source, path, checkpoint = facts.stream
        row = {"kind": "run", "source": source, "path": path, "run_pk": run_pk, **checkpoint.as_row()}
        if fresh:
            pending.add("streams", [_scrub(sql.row("streams", row))])
        else:
            upsert(conn, schema.streams, _text_safe(row), ["run_pk"], [k for k in row if k != "run_pk"])
    if fresh:
        pending.add("ingest_state", [sql.row("ingest_state", {"run_pk": run_pk, **facts.dir_cache})])
    else:
        upsert(conn, schema.ingest_state, {"run_pk": run_pk, **facts.dir_cache}, ["run_pk"], list(facts.dir_cache))
    write_snapshot_files(conn, run_pk, facts.snapshot_files, fresh, pending)
    if own:
        pending.flush(conn)


def write_snapshot_files(conn: Connection, run_pk: int, files: dict[str, dict | None], fresh: bool = False,
                         pending: PendingRows | None = None) -> None:
    sql = _statements(conn)
    for name, values in files.items():
        if values is None:
            conn.exec_driver_sql(f"DELETE FROM snapshot_files WHERE run_pk = {sql.mark} AND name = {sql.mark}",
                                 (run_pk, name))
        elif fresh:
            row = _scrub(sql.row("snapshot_files", {"run_pk": run_pk, "name": name, **values}))
            if pending is not None:
                pending.add("snapshot_files", [row])
            else:
                conn.exec_driver_sql(sql.insert("snapshot_files"), [row])
        else:
            upsert(conn, schema.snapshot_files, _text_safe({"run_pk": run_pk, "name": name, **values}),
                   ["run_pk", "name"], list(values))


def replace_derived(conn: Connection, run_pk: int, rows: RunRows, version: int, scrub: bool = False,
                    derived_cleared: bool = False, pending: PendingRows | None = None) -> None:
    """Re-derivation: the run's derived rows and columns only; its facts stay.
    ``derived_cleared``: the caller cleared them (clear_derived) before deriving;
    ``pending``: the rows are added to it (the caller flushes it in this transaction)."""
    sql = _statements(conn)
    fix = _scrub if scrub else _same
    backend_of(conn).lock_run(conn, run_pk)
    _update_run(conn, sql, run_pk, {**rows.run, "derivation_version": version}, fix)
    if not derived_cleared:
        _delete_derived(conn, sql, run_pk)
    own = pending is None
    if pending is None:
        pending = PendingRows()
    _insert_derived(conn, pending, sql, run_pk, rows, fix)
    if own:
        pending.flush(conn)


def clear_derived(conn: Connection, run_pk: int, resume: dict | None = None) -> None:
    """Delete the derived rows a derivation about to run writes again (caller's
    transaction): all of them, or — resuming from ``resume`` (a derive state) — only
    those a resumed walk may change (reconcile.live_rows); every other row stays."""
    sql = _statements(conn)
    backend_of(conn).lock_run(conn, run_pk)
    if resume is None:
        _delete_derived(conn, sql, run_pk)
        return
    mark = backend_of(conn).mark
    live = live_rows(resume["fold"])
    execute_unread(conn, [
        (f"DELETE FROM legs WHERE run_pk = {mark} AND ordinal = {mark}",
         [(run_pk, live.open_leg)] if live.open_leg is not None else []),
        (f"DELETE FROM rounds WHERE run_pk = {mark} AND leg_ordinal = {mark} AND node_id = {mark} AND seq = {mark}",
         [(run_pk, *key) for key in live.open_rounds]),
        (f"DELETE FROM charges WHERE run_pk = {mark} AND seq > {mark}", [(run_pk, live.charges_after)]),
        (f"DELETE FROM findings WHERE run_pk = {mark} AND seq > {mark}", [(run_pk, live.findings_after)]),
        *((sql.delete_run_rows(table), [(run_pk,)]) for table in ("nodes", "goal_cycles")),
    ])


def write_finished(conn: Connection, pending: PendingRows, run_pk: int, finished: FinishedRows, scrub: bool) -> None:
    """Rows a walk will not change again, handed over while it goes on (derive's sink):
    held back in ``pending`` with the batch's other rows, written out when it is full."""
    sql = _statements(conn)
    fix = _scrub if scrub else _same
    _insert_rows(conn, pending, "legs", sql.object_rows("legs", run_pk, finished.legs), fix)
    _insert_rows(conn, pending, "rounds", sql.object_rows("rounds", run_pk, finished.rounds), fix)
    _insert_rows(conn, pending, "charges", sql.charge_rows(run_pk, finished.charges), fix)
    _insert_rows(conn, pending, "findings", sql.object_rows("findings", run_pk, finished.findings), fix)


def load_derive_state(conn: Connection, run_pk: int, version: int) -> dict | None:
    """The derive state the run's last derivation left, if it was by rules of ``version``."""
    mark = backend_of(conn).mark
    row = conn.exec_driver_sql(f"SELECT derivation_version, state FROM derive_states WHERE run_pk = {mark}",
                               (run_pk,)).first()
    if row is None or row[0] != version:
        return None
    return orjson.loads(row[1])


def save_derive_state(conn: Connection, run_pk: int, state: dict | None, version: int, fresh: bool = False,
                      pending: PendingRows | None = None) -> None:
    """Replace the run's derive state (None: it keeps none, and must not keep an older
    one to resume from; ``fresh``: the run holds none now, being just created or its
    derived rows cleared whole by clear_derived; ``pending``: the new row is held back
    there, written with the run's other rows)."""
    sql = _statements(conn)
    if not fresh:
        conn.exec_driver_sql(sql.delete_run_rows("derive_states"), (run_pk,))
    if state is None:
        return
    text = orjson.dumps(state).decode()
    row = (run_pk, version, state["line"], text)
    if pending is None:
        conn.exec_driver_sql(sql.insert("derive_states"), [row])
    else:
        pending.add("derive_states", [row], len(text))
        pending.spill(conn)


def load_run_facts(conn: Connection, run_pk: int) -> RunFacts:
    """Exactly what derivation reads about one run, from the ledger alone. Its events
    are streamed from the table while derivation walks them (the connection must stay
    open until then)."""
    mark = backend_of(conn).mark
    [(run_id, has_assess)] = fetch_rows(conn, f"SELECT run_id, has_assess FROM runs WHERE id = {mark}", (run_pk,))
    contents = load_file_contents(conn, run_pk)
    listed = fetch_rows(conn, f"SELECT place, name FROM run_files WHERE run_pk = {mark}", (run_pk,))
    return RunFacts(
        run_id=run_id,
        events=iter_events(conn, run_pk),
        terminal_lookup=functools.partial(terminal_keys, conn, run_pk),
        files=contents,
        artifacts=frozenset(name for place, name in listed if place == ""),
        failed_outputs=frozenset(name for place, name in listed if place == "failed"),
        has_assess=bool(has_assess),
    )


def load_file_contents(conn: Connection, run_pk: int) -> dict[str, str]:
    """The stored text of a run's readable JSON files."""
    mark = backend_of(conn).mark
    return dict(fetch_rows(
        conn, f"SELECT name, content FROM snapshot_files WHERE run_pk = {mark} AND error IS NULL AND content IS NOT NULL",
        (run_pk,)))


def _same(row: tuple) -> tuple:
    return row


def _update_run(conn: Connection, sql: _Statements, run_pk: int, values: dict, fix) -> None:
    keys = tuple(values)
    conn.exec_driver_sql(sql.update_run(keys), (*fix(tuple(values[k] for k in keys)), run_pk))


def _delete_derived(conn: Connection, sql: _Statements, run_pk: int) -> None:
    # A derivation that leaves no state (a caller that does not keep one) must not leave
    # an older state behind to be resumed from.
    execute_unread(conn, [(sql.delete_run_rows(table), [(run_pk,)])
                          for table in [*(t.name for t in DERIVED_TABLES), "derive_states"]])


def execute_unread(conn: Connection, statements: list[tuple[str, list[tuple]]]) -> None:
    """Statements (each with its parameter rows) whose results nobody reads, in order, in
    the caller's transaction: on PostgreSQL in one round trip."""
    with backend_of(conn).pipelined(conn):
        for statement, rows in statements:
            if rows:
                executemany(conn, statement, rows)


INSERT_BATCH = 1000  # rows built as tuples at a time: a run's rows are never all built at once


def _insert_rows(conn: Connection, pending: PendingRows, table: str, rows: Iterable[tuple], fix) -> None:
    items = iter(rows)
    while True:
        batch = list(itertools.islice(items, INSERT_BATCH))
        if fix is not _same:
            batch = [fix(r) for r in batch]
        if not batch:
            return
        pending.add(table, batch)
        pending.spill(conn)
        if len(batch) < INSERT_BATCH:
            return


def _insert_derived(conn: Connection, pending: PendingRows, sql: _Statements, run_pk: int, rows: RunRows,
                    fix) -> None:
    _insert_rows(conn, pending, "legs", sql.object_rows("legs", run_pk, rows.legs), fix)
    _insert_rows(conn, pending, "nodes", sql.dict_rows("nodes", run_pk, rows.nodes), fix)
    _insert_rows(conn, pending, "rounds", sql.object_rows("rounds", run_pk, rows.rounds), fix)
    _insert_rows(conn, pending, "charges", sql.charge_rows(run_pk, rows.charges), fix)
    _insert_rows(conn, pending, "findings", sql.object_rows("findings", run_pk, rows.findings), fix)
    if rows.goal_cycle is not None:
        _insert_rows(conn, pending, "goal_cycles", sql.dict_rows("goal_cycles", run_pk, [rows.goal_cycle]), fix)


def record_problem(conn: Connection, run_pk: int | None, path: str, offset: int, reason: str, now: str,
                   machine: str) -> None:
    """A problem ``machine``'s sync found (tail.machine_source; for re-derivation, the
    machine of the run's home): another machine's home may have the same path."""
    # Seen again: open again (resolved_at NULL), whatever a sync in between concluded. One
    # cached statement text (backend.upsert): a stream of bad lines is one call each.
    upsert(conn, schema.problems, _text_safe(dict(
        machine=machine, run_pk=run_pk, path=bounded_path(path), byte_offset=offset, reason=bounded_reason(reason),
        first_seen_at=now, last_seen_at=now, resolved_at=None)),
        ["machine", "path", "byte_offset", "reason"], ["last_seen_at", "run_pk", "resolved_at"])


def machine_problems(machine_column, machine: str):
    """The problems a sync on ``machine`` reads again: its own, and those recorded before
    problems named their machine ('': see resolve_problems)."""
    return machine_column.in_([machine, ""])


def resolve_problems_of_reason(conn: Connection, reason_start: str, now: str, *where) -> None:
    """Mark resolved the open problems, among those ``where`` selects, whose reason starts
    with ``reason_start``: a cause derivation just found gone (the rows it could not derive
    were derived), which no re-read of the files would end (caller's write transaction)."""
    p = schema.problems.c
    conn.execute(update(schema.problems).where(
        p.resolved_at.is_(None), p.reason.startswith(reason_start, autoescape=True), *where).values(resolved_at=now))


def resolve_problems(conn: Connection, paths: Iterable[str], seen: Iterable[tuple[str, int, str]], now: str,
                     machine: str, under: str | None = None, not_reread: Iterable[str] = (),
                     children_of: str | None = None) -> int:
    """Mark resolved the open problems of what this sync, on ``machine``, re-read that it
    did not see again; another machine's problems at the same paths are its own.

    In scope: problems whose path is in ``paths``; or (``under``) is that directory or
    lies below it; or (``children_of``) is an entry directly in that directory, or lies
    below one not in ``not_reread`` with no run of the ledger (a run never indexed) — except
    paths in ``not_reread`` (a file skipped as unchanged, a stream only read on from its
    checkpoint, a run directory skipped by the change check did not re-observe its
    problems). ``seen``: the (path, offset, reason) recorded this time. Paths (as read, not
    as stored) and reasons are compared as record_problem stores them: bounded. A problem
    recorded before problems named their machine ('') is resolved when in scope even if
    seen: the caller has recorded it again under ``machine``. Returns how many were
    resolved."""
    p = schema.problems.c
    direct = {bounded_path(path) for path in paths}
    in_scope = [p.path.in_(list(direct))]
    prefixes = []
    if under is not None:
        prefix = under.rstrip("/") + "/"
        in_scope += [p.path == under, func.substr(p.path, 1, len(prefix)) == prefix]
    if children_of is not None:
        prefixes.append(children_of.rstrip("/") + "/")
        in_scope.append(func.substr(p.path, 1, len(prefixes[0])) == prefixes[0])
    query = select(p.id, p.path, p.byte_offset, p.reason, p.machine, p.run_pk).where(
        p.resolved_at.is_(None), machine_problems(p.machine, machine), or_(*in_scope))
    skip = {bounded_path(path) for path in not_reread}
    keep = {(bounded_path(path), offset, bounded_reason(reason)) for path, offset, reason in seen}

    def scoped(path: str, run_pk: int | None) -> bool:
        if under is not None and (path == under or path.startswith(under.rstrip("/") + "/")):
            return True
        if path in direct:
            return True
        for x in prefixes:
            if path.startswith(x):
                entry, below, _ = path[len(x):].partition("/")
                # Below an entry: only that of a run the ledger never held (its problem is
                # all there is of it) whose entry is not there now.
                return not below or (run_pk is None and x + entry not in skip)
        return False

    stale = [row.id for row in conn.execute(query)
             if scoped(row.path, row.run_pk) and row.path not in skip
             and (row.machine == "" or (row.path, row.byte_offset, row.reason) not in keep)]
    for start in range(0, len(stale), 500):
        conn.execute(update(schema.problems).where(p.id.in_(stale[start:start + 500])).values(resolved_at=now))
    return len(stale)


def resolve_runs_problems(conn: Connection, run_pks, now: str) -> None:
    """Mark resolved the open problems of these runs (a list of keys, or a select of
    them): no sync will read what they were about again (the run directory gone, the home
    forgotten); they stay as history."""
    p = schema.problems.c
    conn.execute(update(schema.problems).where(p.run_pk.in_(run_pks), p.resolved_at.is_(None)).values(resolved_at=now))


def resolve_moved_run_problems(conn: Connection, run_pk: int, old_dir: str, now: str) -> int:
    """Mark resolved a run's open problems under the directory it was read at before (its
    home renamed, a symlink no longer used): read again where it is now, each is recorded
    again under the new path if its cause is still there. Another run's problems (another
    home now at the old path) are left as they are. Returns how many were resolved."""
    p = schema.problems.c
    prefix = old_dir.rstrip("/") + "/"
    done = conn.execute(update(schema.problems).where(
        p.run_pk == run_pk, p.resolved_at.is_(None),
        or_(p.path == old_dir, func.substr(p.path, 1, len(prefix)) == prefix)).values(resolved_at=now))
    return done.rowcount


EVENT_COLUMNS = ("run_pk", "line_no", "byte_offset", "schema", "ts", "event", "node_id", "raw")
RUN_FILE_COLUMNS = ("run_pk", "place", "name")
CHARGE_TOKEN_COLUMNS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")


def _event_tuple(run_pk: int, event: Event) -> tuple:
    """An events row in EVENT_COLUMNS order (the hot path: ~33 per run, no dict), made
    here for every path that stores lines (inline, pool workers' work files and COPY
    text). Of its text columns only ts and node_id can hold a NUL (schema is an int,
    event one of a closed set; ts needs only parse: fromisoformat takes a NUL as the
    date-time separator or at the end): NUL becomes U+FFFD there as in derived text,
    so PostgreSQL can store the row and events.node_id equals nodes.node_id."""
    data = event.data
    get = data.get
    ts, node_id = data["ts"], get("node_id")
    if "\x00" in ts:  # (the test first: _no_nul's call is paid only by such a line)
        ts = no_nul(ts)
    if node_id and "\x00" in node_id:
        node_id = no_nul(node_id)
    return (run_pk, event.line_no, event.byte_offset, get("schema"), ts, get("event"), node_id, event.raw)
