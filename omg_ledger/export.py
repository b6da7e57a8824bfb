"""Copy a whole ledger into another database (e.g. SQLite → a shared PostgreSQL).

Syncing the same homes into the new database rebuilds everything still on disk; only a
copy keeps the history of runs whose directories are gone. The target must be empty
(freshly migrated): merging two ledgers is what syncing into a shared one is for.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from . import schema
from .backend import backend_of
from .db import one_line, write_transaction
from .errors import BadArgument, DatabaseUnavailable, database_trouble

BATCH_ROWS = 5_000


def export_ledger(source: Engine, target: Engine, progress: Callable[[str, int], None] | None = None,
                  wait_seconds: float = 60.0) -> dict[str, int]:
    """Copy every table, keys included, in one transaction on the target, holding the
    target's sync lock throughout (waited for up to ``wait_seconds``, then LedgerBusy):
    a sync into it waits for the copy instead of writing rows whose keys it then holds.
    A failure to read the source or to write the target says which of the two failed."""
    copied: dict[str, int] = {}
    try:
        with (backend_of(target).export_lock(target, wait_seconds), write_transaction(target) as out,
              _read(source.connect) as src):
            if src.dialect.name == "postgresql":
                # Every table read in one snapshot (the whole copy is one transaction, autobegun):
                # at READ COMMITTED each SELECT would see the syncs committed since the last, and
                # a stream's checkpoint could be copied past lines the copy does not hold.
                src = src.execution_options(isolation_level="REPEATABLE READ")
            if any(out.execute(select(func.count()).select_from(table)).scalar()
                   for table in schema.metadata.sorted_tables):
                raise BadArgument("the target ledger is not empty; export only into a new database "
                                  "(to combine ledgers, sync each machine's homes into one database)")
            for table in schema.metadata.sorted_tables:  # parents before children
                count = 0
                result = _read(lambda t=table: src.execution_options(stream_results=True).execute(select(t)))
                while batch := _read(lambda r=result: r.fetchmany(BATCH_ROWS)):
                    out.execute(table.insert(), [dict(row._mapping) for row in batch])
                    count += len(batch)
                copied[table.name] = count
                if progress is not None:
                    progress(table.name, count)
            # Explicit ids were inserted: a sequence must move past them.
            backend_of(out).after_explicit_ids(out, [t.name for t in schema.metadata.sorted_tables
                                                     if "id" in t.c and list(t.primary_key.columns) == [t.c.id]])
    except OperationalError as exc:  # the source's are raised by _read: this is the target's (a full disk…)
        trouble = database_trouble(exc)
        if type(trouble) is DatabaseUnavailable:
            trouble = DatabaseUnavailable(
                f"cannot write the export's target {_shown(target)}: {one_line(exc)}; nothing of the copy was "
                f"kept (it is one transaction): the target is still empty, export into it again")
        raise trouble from exc
    backend_of(target).settle_file(target)
    return copied


def _read(step):
    """``step()``, reading the source ledger: its failure is the source's, said as such."""
    try:
        return step()
    except OperationalError as exc:
        trouble = database_trouble(exc)
        if type(trouble) is DatabaseUnavailable:
            trouble = DatabaseUnavailable(f"cannot read the ledger to export: {one_line(exc)}")
        raise trouble from exc


def _shown(engine: Engine) -> str:
    """The target as a user names it: a SQLite file's path, else its URL, password hidden."""
    return backend_of(engine).file_path(engine) or engine.url.render_as_string(hide_password=True)
