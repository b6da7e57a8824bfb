"""The `omg-ledger` command line: parse options, call the library, render.

Only this module imports click. Library errors (LedgerError subclasses) are turned
into one-line messages here, with exit codes cron can act on.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import click
import orjson

from . import config, render
from .db import open_ledger, stderr_say
from .errors import LedgerError

EXIT_PROBLEMS = 1  # sync --strict: completed, but problems were recorded


def _emit_json(value: object) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")


def db_option(f: Callable) -> Callable:
    return click.option(
        "--db", "db", metavar="URL|PATH", envvar=config.ENV_DB, default=None,
        help="Ledger database: a SQLite path or a SQLAlchemy URL (postgresql+psycopg://…). "
             "Env: OMG_LEDGER_DB. Default: ~/.local/share/omg-ledger/ledger.sqlite.",
    )(f)


def home_option(f: Callable) -> Callable:
    return click.option(
        "--home", "homes", metavar="[LABEL=]DIR", multiple=True,
        help="oh-my-graph home to read (repeatable). Env: OMG_HOME. Default: ~/.oh-my-graph. "
             "LABEL=DIR names the home; the default label is <hostname>:<absolute path>.",
    )(f)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout, nothing else.")(f)


def ledger_errors(f: Callable) -> Callable:
    """Convert library errors into a message and an exit code, once, at the boundary."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except LedgerError as exc:
            click.echo(f"omg-ledger: error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


def open_db(db: str | None):
    return open_ledger(config.resolve_db(db), say=stderr_say)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="omg-ledger")
def main() -> None:
    """A ledger of oh-my-graph run history: what was spent, how every verdict was
    reached, and which runs need attention.

    \b
    Typical use:
      omg-ledger sync                     # index ~/.oh-my-graph into the ledger
      omg-ledger runs                     # every run with its live status
      omg-ledger cost --since 7d --by day # spend, with unpriced work counted
      omg-ledger audit --since 1d || notify-someone
    """


@main.command()
@db_option
@home_option
@json_option
@click.option("--strict", is_flag=True, help="Exit 1 when problems were recorded (default: exit 0 once the sync completed).")
@click.option("--wait", "wait_seconds", type=float, default=60.0, show_default=True,
              help="Seconds to wait for another sync holding the ledger before giving up (exit 75).")
@click.option("--invocations", "invocation_files", metavar="PATH", multiple=True, envvar=config.ENV_INVOCATIONS,
              help="Also index a runner's role-invocation events.jsonl (repeatable). Env: OMG_LEDGER_INVOCATIONS.")
@ledger_errors
def sync(db, homes, as_json, strict, wait_seconds, invocation_files) -> None:
    """Index oh-my-graph run directories into the ledger.

    Reads <home>/runs/* and <home>/plans/* read-only; only new complete stream lines
    and changed files are read, so running it every few minutes from cron is cheap.
    Problems in the input are listed on stderr and kept in the ledger's problems table.

    \b
    Example:
      omg-ledger sync --home ~/.oh-my-graph --json
    Exit codes: 0 done; 1 done with problems (--strict only); 3 database trouble;
    75 another sync holds the ledger.
    """
    from .sync import sync as run_sync

    engine = open_db(db)
    progress = render.progress_bar("sync") if (sys.stderr.isatty() and not as_json) else None
    report = run_sync(engine, config.resolve_homes(homes), wait_seconds=wait_seconds, progress=progress)
    if invocation_files:
        from .invocation_sync import sync_invocation_files

        sync_invocation_files(engine, list(invocation_files), report)
    if progress is not None:
        progress.close()
    for problem in report.problems:
        click.echo(f"omg-ledger: problem: {problem.path} at byte {problem.offset}: "
                   f"{render.safe(problem.reason)}", err=True)
    if as_json:
        _emit_json(report.as_dict())
    elif sys.stdout.isatty():
        click.echo(render.sync_summary(report))
    if strict and report.problems:
        sys.exit(EXIT_PROBLEMS)


@main.command()
@db_option
@json_option
@click.option("--since", metavar="T", help="Only runs with an event since T (7d, 12h, 2026-11-01, RFC 3339).")
@click.option("--status", "statuses", multiple=True, metavar="S",
              type=click.Choice(["PLANNING", "RUNNING", "ABANDONED", "PAUSED", "PASS", "FAIL", "NOT-KNOWN-YET"],
                                case_sensitive=False),
              help="Only runs with this status (repeatable).")
@click.option("--home", "home_labels", multiple=True, metavar="LABEL", help="Only runs of this home label (repeatable).")
@ledger_errors
def runs(db, as_json, since, statuses, home_labels) -> None:
    """List runs, newest first, with their status probed live.

    \b
    Example:
      omg-ledger runs --since 2d --status ABANDONED --status PAUSED
    A cost with unpriced work beside it is a lower bound ("≥ $1.20 +3 unpriced").
    """
    from .reports.runs import list_runs
    from .timespec import parse_since

    engine = open_db(db)
    rows = list_runs(engine, since_us=parse_since(since), statuses=tuple(s.upper() for s in statuses),
                     home_labels=home_labels)
    if as_json:
        _emit_json(rows)
    else:
        click.echo(render.runs_table(rows))


@main.command()
@db_option
@json_option
@click.argument("run_id")
@ledger_errors
def show(db, as_json, run_id) -> None:
    """Show one run: legs, nodes, rounds, charges, findings, problems, status.

    RUN_ID may be a unique prefix.

    \b
    Example:
      omg-ledger show 20261129-181518
    """
    from .reports.runs import show_run

    detail = show_run(open_db(db), run_id)
    if as_json:
        _emit_json(detail)
    else:
        click.echo(render.run_detail(detail))


@main.group(name="db")
def db_group() -> None:
    """Ledger database migrations (alembic)."""


@db_group.command(name="upgrade")
@db_option
@ledger_errors
def db_upgrade(db) -> None:
    """Bring the ledger database to the newest schema (every command does this too)."""
    from .db import current_revision

    engine = open_db(db)
    with engine.connect() as conn:
        click.echo(f"ledger database at revision {current_revision(conn)} (head)")


@db_group.command(name="current")
@db_option
@ledger_errors
def db_current(db) -> None:
    """Print the ledger database's revision and this omg-ledger's head, without changing anything."""
    from .db import create_ledger_engine, current_revision, head_revision

    engine = create_ledger_engine(config.resolve_db(db))
    with engine.connect() as conn:
        current = current_revision(conn)
    click.echo(f"current: {current or '(empty database)'}\nhead:    {head_revision()}")


if __name__ == "__main__":  # pragma: no cover
    main()
