"""Errors the library raises, named after the condition. The CLI turns them into
messages that say what to do next, and exit codes cron can act on."""

from __future__ import annotations

import errno


class LedgerError(Exception):
    """Base of every error omg-ledger reports to a user."""

    exit_code = 1


class DatabaseTooNew(LedgerError):
    """The ledger database was migrated by a newer omg-ledger."""

    exit_code = 3


class UpgradeBlocked(LedgerError):
    """A user's own object in the ledger's database stands in the way of a migration
    (the upgrade rolled back, nothing changed)."""

    exit_code = 3


class UnreadableValue(LedgerError):
    """A row of the ledger holds a value of a type its column never has (hand-edited
    text in an integer column, say): reports cannot read it."""

    exit_code = 3


class DatabaseUnavailable(LedgerError):
    """The ledger database cannot be opened or written (path, permissions, disk)."""

    exit_code = 3


class DatabaseDamaged(LedgerError):
    """The ledger file is corrupt: SQLite found pages it cannot read."""

    exit_code = 3


class LedgerBusy(LedgerError):
    """Another sync holds the ledger for longer than we were told to wait, or another
    process locks the database against us for longer than SQLite's busy timeout."""

    exit_code = 75  # EX_TEMPFAIL: cron may simply try again later


class SyncWorkerLost(LedgerError):
    """A process reading and deriving new runs for the sync died (killed, out of
    memory): the open batch rolled back, runs committed before it are kept."""

    exit_code = 75  # EX_TEMPFAIL: the next sync carries on


class OutOfResources(LedgerError):
    """The process ran out of memory or of open files (a ulimit, a system-wide table
    full) while it wrote the ledger: the open batch rolled back, runs committed are kept."""

    exit_code = 75  # EX_TEMPFAIL: as for a worker the OOM killer ended


# What an OSError with one of these says is about this process (or the system), not
# the file it was opening: never a problem of what was read.
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


def out_of_resources(exc: OSError) -> bool:
    """Whether ``exc`` says the process ran out of open files or memory."""
    return exc.errno in _RESOURCE_ERRNOS


class RunNotFound(LedgerError):
    """No run has that id or prefix: the argument names nothing (a usage error)."""

    exit_code = 2


class AmbiguousRun(LedgerError):
    """A prefix matches several runs."""

    exit_code = 2


class ReadOnlyViolation(LedgerError):
    """A statement given to `sql`/`query` would write."""

    exit_code = 2


class BadArgument(LedgerError):
    exit_code = 2


class HomeConflict(LedgerError):
    """A home named with a label or path that belongs to another directory."""

    exit_code = 2


class LedgerMissing(LedgerError):
    """A read named a path that holds no ledger (reads never create one)."""

    exit_code = 3


class NotALedger(LedgerError):
    """The path holds something other than an omg-ledger database."""

    exit_code = 3


class DatabaseTooOld(LedgerError):
    """The ledger is at a revision older than what this read needs (reads never migrate)."""

    exit_code = 3


class UnsupportedDatabase(LedgerError):
    """--db names a database omg-ledger cannot use (another engine, a missing driver)."""

    exit_code = 3
def database_trouble(exc: BaseException) -> LedgerError:
    """The one-line error for a database failure nothing more specific caught.

    ``exc`` is a driver error as SQLAlchemy wraps it (``.orig`` is the driver's own);
    its SQL and parameters are left out: they say nothing a user can act on.
    """
    orig = getattr(exc, "orig", None) or exc
    message = " ".join(str(orig).split()) or type(orig).__name__
    if is_locked(message):
        return ledger_locked("the ledger database")
    if "malformed" in message or "file is not a database" in message:
        return DatabaseDamaged(
            f"the ledger database is damaged ({message}); restore it from a backup, or delete it "
            f"and run `omg-ledger sync` to rebuild it from the homes (runs whose directories are "
            f"gone exist only in a backup)")
    return DatabaseUnavailable(f"database error: {message}")


def is_locked(message: str) -> bool:
    """SQLite's words for a lock another connection held past the busy timeout."""
    return "database is locked" in message or "database table is locked" in message


def ledger_locked(shown: str) -> LedgerBusy:
    return LedgerBusy(f"{shown} is locked by another process (waited for it, in vain): try again "
                      f"later (a sync never locks readers out; a program holding an exclusive lock on "
                      f"the file does)")


def require_utf8(text: str, what: str, error: type[LedgerError] | None = None) -> None:
    """Raise ``error`` (BadArgument) unless `text` is valid UTF-8 text. Bytes that are not
    (a shell's $'\\xff', a file name) reach Python as lone surrogates, which no database
    driver can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        at = len(text[:exc.start].encode("utf-8")) + 1
        raise (error or BadArgument)(f"{what} is not valid UTF-8 at byte {at}") from None
