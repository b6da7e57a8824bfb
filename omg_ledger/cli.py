"""The `omg-ledger` command line: parse options, call the library, render.

Only this module imports click. Library errors (LedgerError subclasses) are turned
into one-line messages here, with exit codes cron can act on.
"""

from __future__ import annotations

# ruff: noqa: E402 - the Ctrl-C guard must be in place before the imports below it.
import os
import signal
import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


def _interrupted_while_starting(_signum: int, _frame: object) -> None:
    # Ctrl-C while the libraries load: nothing is open yet, so leave at once, quietly.
    os.write(2, b"omg-ledger: interrupted\n")
    os._exit(EXIT_INTERRUPTED)


try:
    _SIGINT_BEFORE = signal.signal(signal.SIGINT, _interrupted_while_starting)
except ValueError:  # imported outside the main thread: the signal is not ours to handle
    _SIGINT_BEFORE = None

import functools
from collections.abc import Callable

import click
import orjson

from . import config, render
from .db import open_ledger, stderr_say
from .errors import BadArgument, DatabaseDamaged, LedgerError, database_trouble
from .status import STATUSES

EXIT_PROBLEMS = 1  # sync --strict: completed, but problems were recorded
EXIT_ATTENTION = 1  # audit: something needs a human


def _emit_json(value: object) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")


def _emit_json_array(items) -> None:
    """One JSON array, written item by item: a long listing is never all in memory."""
    out = sys.stdout
    out.write("[")
    for n, item in enumerate(items):
        out.write(("," if n else "") + "\n  " + orjson.dumps(item, option=orjson.OPT_NON_STR_KEYS).decode())
    out.write("\n]\n")


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
            if isinstance(exc.__cause__, Exception) and isinstance(database_trouble(exc.__cause__), DatabaseDamaged):
                exc = database_trouble(exc.__cause__)  # opening found the damage: say what to do
            click.echo(f"omg-ledger: error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper


def open_db(db: str | None):
    return open_ledger(config.resolve_db(db), say=stderr_say)


class _LedgerGroup(click.Group):
    """The top-level group: Ctrl-C and database damage end any command in one line."""

    def invoke(self, ctx: click.Context):
        from sqlalchemy.exc import DBAPIError  # already loaded by .db

        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("omg-ledger: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except DBAPIError as exc:
            error = database_trouble(exc)
            click.echo(f"omg-ledger: error: {error}", err=True)
            sys.exit(error.exit_code)


@click.group(cls=_LedgerGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
              type=click.Choice(STATUSES,
                                case_sensitive=False),
              help=f"Only runs with this status (repeatable): {', '.join(STATUSES)}.")
@click.option("--home", "home_labels", multiple=True, metavar="LABEL", help="Only runs of this home label (repeatable).")
@ledger_errors
def runs(db, as_json, since, statuses, home_labels) -> None:
    """List runs, newest first, with their status probed live.

    \b
    Example:
      omg-ledger runs --since 2d --status ABANDONED --status PAUSED
    A cost with unpriced work beside it is a lower bound ("≥ $1.20 +3 unpriced").
    """
    from .reports.runs import iter_runs
    from .timespec import parse_since

    engine = open_db(db)
    rows = iter_runs(engine, since_us=parse_since(since), statuses=tuple(s.upper() for s in statuses),
                     home_labels=home_labels)
    if as_json:
        _emit_json_array(rows)
    else:
        click.echo(render.runs_table(list(rows)))


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
    """Bring the ledger database to the newest schema (every command does this too).

    \b
    Example:
      omg-ledger db upgrade --db postgresql+psycopg://ledger@db.internal/ledger
    """
    from .db import current_revision

    engine = open_db(db)
    with engine.connect() as conn:
        click.echo(f"ledger database at revision {current_revision(conn)} (head)")


@db_group.command(name="current")
@db_option
@ledger_errors
def db_current(db) -> None:
    """Print the ledger database's revision and this omg-ledger's head, without changing anything.

    \b
    Example:
      omg-ledger db current --db ~/.local/share/omg-ledger/ledger.sqlite
    """
    from .db import create_ledger_engine, current_revision, head_revision

    engine = create_ledger_engine(config.resolve_db(db))
    with engine.connect() as conn:
        current = current_revision(conn)
    click.echo(f"current: {current or '(empty database)'}\nhead:    {head_revision()}")


@main.command()
@db_option
@json_option
@click.option("--csv", "as_csv", is_flag=True, help="Print the per-group rows as CSV on stdout.")
@click.option("--since", metavar="T", help="Only invocations started since T (7d, 12h, 2026-11-01, RFC 3339).")
@click.option("--by", "by", type=click.Choice(["role", "status", "milestone"]), default="role", show_default=True,
              help="Group by role, end status or milestone.")
@ledger_errors
def invocations(db, as_json, as_csv, since, by) -> None:
    """Role invocations of runners: counts, failures, durations, who is working now.

    Reads what `omg-ledger sync --invocations PATH` indexed from a runner's
    events.jsonl. A failure is an end whose status is neither a success (DONE, GO,
    SUCCESS, OBSERVED, READY, ACCEPT) nor a judged verdict (BLOCKED, NEEDS_DEEP,
    NO-GO, NEEDS_CONFIRMATION). Percentiles are nearest-rank. Dangling starts (no end
    yet) are listed whatever --since says.

    \b
    Example:
      omg-ledger sync --invocations ~/proj/.ledger/events.jsonl
      omg-ledger invocations --since 7d --by status
    """
    from datetime import UTC, datetime

    from .errors import BadArgument
    from .reports.invocations import invocation_report, to_csv, to_text
    from .timespec import parse_since

    if as_json and as_csv:
        raise BadArgument("--json and --csv are exclusive: choose one")
    now = datetime.now(UTC)
    report = invocation_report(open_db(db), now=now, by=by, since_us=parse_since(since, now=now))
    if as_json:
        _emit_json(report)
    elif as_csv:
        click.echo(to_csv(report), nl=False)
    else:
        click.echo(to_text(report))


def csv_option(f: Callable) -> Callable:
    return click.option("--csv", "as_csv", is_flag=True, help="Print CSV on stdout (header row first).")(f)


def _emit(value, as_json: bool, as_csv: bool, to_csv: Callable, to_text: Callable) -> None:
    if as_json and as_csv:
        raise BadArgument("--json and --csv are exclusive: choose one")
    if as_json:
        _emit_json(value)
    else:
        click.echo(to_csv(value) if as_csv else to_text(value), nl=not as_csv)


@main.command()
@db_option
@json_option
@csv_option
@click.option("--since", metavar="T", help="Start of the window: 30m, 12h, 7d, 2w, 2026-11-01, 2026-11-01T08:00, RFC 3339.")
@click.option("--until", metavar="T", help="End of the window (exclusive). Default: now when --since is given.")
@click.option("--by", type=click.Choice(["day", "week", "month", "run", "node", "runtime", "goal", "leg-kind"]),
              help="Group rows; without it only the total is shown.")
@click.option("--tz", metavar="ZONE", help="IANA zone for periods and dates without an offset. Default: local zone.")
@click.option("--home", "home_labels", multiple=True, metavar="LABEL", help="Only runs of this home label (repeatable).")
@ledger_errors
def cost(db, as_json, as_csv, since, until, by, tz, home_labels) -> None:
    """Spend, tokens, invocations and unpriced invocations, per group and in total.

    Each charge counts at its own time; --since 7d is the last 7×24 h. Days and weeks
    (from Monday) and months are cut in --tz, DST included. A group with unpriced work
    (Codex, killed calls) shows a lower bound: "≥ $12.40 +3 unpriced". Node keys are
    <graph>/<node id>; goal keys the goal's first run id, or "(no goal)". JSON gives
    cost_nano_usd exactly and cost_usd as a number (at most 9 decimals).

    \b
    Example:
      omg-ledger cost --since 7d --by day --tz Europe/Berlin
      omg-ledger cost --since 2026-11-01 --until 2026-12-01 --by runtime --json
    """
    from .reports.cost import cost_report

    report = cost_report(open_db(db), since=since, until=until, by=by, tz=tz, home_labels=home_labels)
    _emit(report, as_json, as_csv, render.cost_csv, render.cost_text)


@main.command()
@db_option
@json_option
@click.option("--since", metavar="T", help="Only runs with an event since T (7d, 12h, 2026-11-01, RFC 3339).")
@ledger_errors
def audit(db, as_json, since) -> None:
    """One report: PASS provenance, judged vs machinery FAILs, budget overruns,
    ABANDONED and PAUSED runs (probed live), findings, input problems, build evidence
    of auto runs, unpriced work.

    Exit status 1 means something needs attention: an ABANDONED or PAUSED run, a budget
    overrun, a reconciliation finding or a recorded input problem. Unverified passes
    and unpriced work are reported but do not set it.

    \b
    Example:
      omg-ledger audit --since 1d || notify-someone
    """
    from .reports.audit import audit_report

    report = audit_report(open_db(db), since=since)
    _emit(report, as_json, False, str, render.audit_text)
    sys.exit(EXIT_ATTENTION if report["needs_attention"] else 0)


@main.command()
@db_option
@json_option
@csv_option
@click.argument("statement")
@ledger_errors
def sql(db, as_json, as_csv, statement) -> None:
    """Run one read-only SQL statement against the ledger.

    Anything that would write (INSERT, UPDATE, DELETE, CREATE, DROP, ATTACH, a PRAGMA
    assignment, several statements) is refused and nothing changes (exit 2). The
    v_charges, v_runs, v_nodes, v_node_rounds, v_problems and v_findings views are the
    stable names to query.

    \b
    Example:
      omg-ledger sql "SELECT runtime, SUM(cost_nano_usd) FROM v_charges GROUP BY runtime"
    """
    from .reports.sql import run_sql

    result = run_sql(open_db(db), statement).as_dict()
    _emit(result, as_json, as_csv, render.sql_csv, render.sql_text)


@main.command()
@db_option
@json_option
@csv_option
@click.option("--list", "listing", is_flag=True, help="List the saved queries with their header comments.")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE", help="Bind :NAME (repeatable).")
@click.argument("name", required=False)
@ledger_errors
def query(db, as_json, as_csv, listing, params, name) -> None:
    """Run a saved query (queries/NAME.sql) read-only, or list them with --list.

    \b
    Example:
      omg-ledger query --list
      omg-ledger query spend_by_day --param since=2026-11-01
    """
    from .reports.sql import parse_params, run_saved, saved_queries

    if listing or not name:
        click.echo(render.saved_queries_text(saved_queries()))
        return
    result = run_saved(open_db(db), name, parse_params(params)).as_dict()
    _emit(result, as_json, as_csv, render.sql_csv, render.sql_text)


@main.command()
@db_option
@click.option("--to", "target", required=True, metavar="URL|PATH",
              help="The new, empty ledger database (created and migrated if needed).")
@ledger_errors
def export(db, target) -> None:
    """Copy the whole ledger into another database, e.g. SQLite into a shared PostgreSQL.

    Unlike syncing the same homes into the new database, a copy keeps the history of
    runs whose directories are gone. The target must be empty.

    \b
    Example:
      omg-ledger export --db ~/.local/share/omg-ledger/ledger.sqlite \\
                        --to postgresql+psycopg://ledger@db.internal/ledger
    """
    from .export import export_ledger

    copied = export_ledger(open_db(db), open_db(target))
    click.echo(f"copied {sum(copied.values())} rows: " + ", ".join(f"{n} {t}" for t, n in copied.items() if n))


if _SIGINT_BEFORE is not None:
    # The command line is defined: from here on Ctrl-C is a KeyboardInterrupt, so open
    # transactions roll back and locks are released, and _LedgerGroup.invoke says so.
    signal.signal(signal.SIGINT, _SIGINT_BEFORE)

if __name__ == "__main__":  # pragma: no cover
    main()
