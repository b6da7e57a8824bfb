"""Errors the library raises, named after the condition. The CLI turns them into
messages that say what to do next, and exit codes cron can act on."""

from __future__ import annotations


class LedgerError(Exception):
    """Base of every error omg-ledger reports to a user."""

    exit_code = 1


class DatabaseTooNew(LedgerError):
    """The ledger database was migrated by a newer omg-ledger."""

    exit_code = 3


class DatabaseUnavailable(LedgerError):
    """The ledger database cannot be opened or written (path, permissions, disk)."""

    exit_code = 3


class LedgerBusy(LedgerError):
    """Another sync holds the ledger for longer than we were told to wait."""

    exit_code = 75  # EX_TEMPFAIL: cron may simply try again later


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
