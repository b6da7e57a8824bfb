"""The `omg-ledger` command line: parse options, call the library, render.

Only this module imports click. Library errors (LedgerError subclasses) are turned
into one-line messages here, with exit codes cron can act on.
"""

from __future__ import annotations

# ruff: noqa: E402 - the Ctrl-C guard must be in place before the imports below it.
import errno
import os
import signal
import sys

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM, what a shell reports for `kill`
EXIT_HUNG_UP = 129  # 128 + SIGHUP: the terminal the command ran in was closed
AUDIT_NEWEST_FAILS = 20  # FAILs of each kind `audit` lists without --verbose: a summary a person reads


def _interrupted_while_starting(_signum: int, _frame: object) -> None:
    # Ctrl-C while the libraries load: nothing is open yet, so leave at once, quietly.
    os.write(2, b"omg-ledger: interrupted\n")
    os._exit(EXIT_INTERRUPTED)


try:
    _SIGINT_BEFORE = signal.signal(signal.SIGINT, _interrupted_while_starting)
except ValueError:  # imported outside the main thread: the signal is not ours to handle
    _SIGINT_BEFORE = None

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import NoReturn, TypeVar

import click
import orjson

from . import config, render
from .errors import (
    BadArgument,
    DatabaseDamaged,
    LedgerBusy,
    LedgerError,
    database_trouble,
    require_utf8,
)
from .status import STATUSES
from .version import VERSION

EXIT_PROBLEMS = 1  # sync --strict: completed, but problems were recorded
EXIT_ATTENTION = 1  # audit: something needs a human
ENV_NOW = "OMG_LEDGER_NOW"


class _OutputFailed(Exception):
    """Writing stdout failed: its errno and reason. Not an OSError, so click's own
    handler (which calls a broken pipe success) never sees it."""

    def __init__(self, number: int, reason: str) -> None:
        super().__init__(reason)
        self.errno = number


def _stdout():
    """sys.stdout for a command that writes there; when it is closed (`cmd >&-`), the
    failure, so output is never dropped while the command reads as done."""
    if sys.stdout is None:
        raise _OutputFailed(errno.EBADF, "stdout is closed")
    return sys.stdout


def _is_terminal(stream) -> bool:
    return stream is not None and stream.isatty()


def _write_nowhere(fd: int) -> None:
    """Point ``fd`` at /dev/null: what is still buffered for it, and every later write,
    goes nowhere instead of failing again (at the interpreter's exit: a traceback)."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)


@contextlib.contextmanager
def _writing_stdout() -> Iterator[None]:
    """A reader that went away (`| head`) is no failure: the rest of the output goes
    nowhere and the command ends as it would have, quietly, with its own exit code
    (`audit | head -1` still exits 1 when something needs attention). Any other write
    error (a full disk, a closed stdout, text its encoding cannot hold) is _OutputFailed."""
    try:
        yield
    except UnicodeEncodeError as exc:
        raise _OutputFailed(errno.EILSEQ, f"its encoding {exc.encoding} cannot hold {exc.object[exc.start:exc.end]!r} "
                                          "(set PYTHONIOENCODING=utf-8, or a UTF-8 locale)") from None
    except OSError as exc:
        _reader_gone_or_failed(exc)


def _reader_gone_or_failed(exc: OSError) -> None:
    """A broken pipe sends the rest of stdout nowhere; any other write error is _OutputFailed."""
    if exc.errno != errno.EPIPE:
        raise _OutputFailed(exc.errno or errno.EIO, exc.strerror or str(exc)) from None
    _write_nowhere(1)


@contextlib.contextmanager
def _parsing() -> Iterator[None]:
    """Parsing the command line writes only --help and --version, and then exits 0."""
    try:
        yield
    except OSError as exc:
        _reader_gone_or_failed(exc)
        raise click.exceptions.Exit(0) from None


def _flush_stdout() -> None:
    if sys.stdout is not None:
        with _writing_stdout():
            sys.stdout.flush()


def _output_failed(exc: _OutputFailed) -> NoReturn:
    """End a command whose stdout cannot be written: one line and exit 2, as for a
    --output file that cannot be written (the output is the command's result: a cron
    job must not read it as done)."""
    _write_nowhere(1)
    reason = str(exc) if exc.errno == errno.EBADF and sys.stdout is None else f"stdout: {exc}"
    _say_line(f"omg-ledger: error: cannot write the output: {reason}")
    sys.exit(BadArgument.exit_code)


def _to_stderr(text: str, nl: bool = True) -> None:
    """A message on stderr. One that cannot be shown (stderr a closed pipe, a full disk)
    must not stop the work: sync's problems are in the ledger too."""
    try:
        click.echo(text, err=True, nl=nl)
    except OSError:
        _write_nowhere(2)


def _say(text: str, err: bool = False, nl: bool = True) -> None:
    """The terminal boundary for text: whatever a run directory put into `text`, no
    control, bidi or separator character leaves raw (render.inert); our line breaks stay."""
    if err:
        _to_stderr(render.inert(text, keep_newlines=True), nl=nl)
        return
    _stdout()
    with _writing_stdout():
        click.echo(render.inert(text, keep_newlines=True), nl=nl)


def _say_lines(lines, colour: bool = False) -> None:
    """Lines as _say writes them, written in chunks as they come (a long report is never
    held whole); ``colour``: the verdict words in our own colour codes, after inert."""
    def flush(chunk: list[str]) -> None:
        text = render.inert("\n".join(chunk), keep_newlines=True)
        with _writing_stdout():
            click.echo((render.colour_verdicts(text) if colour else text) + "\n", nl=False)

    _stdout()

    chunk: list[str] = []
    size = 0
    for line in lines:
        chunk.append(line)
        size += len(line)
        if size >= 65536:
            flush(chunk)
            chunk, size = [], 0
    if chunk:
        flush(chunk)


def _say_line(text: str) -> None:
    """One message line on stderr, inert, newlines in it escaped too: it stays one line."""
    _to_stderr(render.inert(text))


EXIT_DATABASE = 3


def _one_line(exc: Exception) -> str:
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def _emit_json(value: object) -> None:
    data = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
    out = _stdout()
    binary = getattr(out, "buffer", None)
    with _writing_stdout():
        if binary is None:
            out.write(render.json_inert(data.decode()) + "\n")
            return
        # JSON is UTF-8 (RFC 8259) whatever the locale says, as click writes text.
        out.flush()
        binary.write(render.json_inert_utf8(data) + b"\n")


JSON_ARRAY_CHUNK_BYTES = 1 << 18  # written at once: few writes, memory flat in the listing's length


def _emit_json_array(items, chunk_bytes: int = JSON_ARRAY_CHUNK_BYTES) -> None:
    """One JSON array, one item a line, written a chunk at a time: a long listing is
    never all in memory, and a write per item (a system call each when stdout is
    unbuffered) is not paid."""
    dumps, option, inert = orjson.dumps, orjson.OPT_NON_STR_KEYS, render.json_inert_utf8
    out = _stdout()
    binary = getattr(out, "buffer", None)  # UTF-8 (RFC 8259) whatever the locale says
    if binary is not None:
        with _writing_stdout():
            out.flush()  # the text layer may hold earlier output: keep the order
    raw_write = binary.write if binary is not None else (lambda data: out.write(data.decode()))

    def write(data) -> None:
        with _writing_stdout():
            raw_write(data)
    # Each item is appended as soon as it is serialized (orjson's result holds a buffer
    # far larger than its text: a list of them would not stay small).
    chunk = bytearray(b"[")
    separator = b"\n  "
    for item in items:
        chunk += separator
        chunk += inert(dumps(item, option=option))
        separator = b",\n  "
        if len(chunk) >= chunk_bytes:
            write(chunk)
            chunk = bytearray()
    chunk += b"\n]\n"
    write(chunk)


SINCE_HELP = "Start of the window: 30m, 12h, 7d, 2w, 3mo, 1y, today, yesterday, 2026-11-01, 2026-11-01T08:00, RFC 3339."


def tz_option(f: Callable) -> Callable:
    return click.option("--tz", metavar="ZONE",
                        help="IANA zone to read dates without an offset in (and to show times in). "
                             "Default: local zone (times shown in UTC).")(f)


def db_option(f: Callable) -> Callable:
    return click.option(
        "--db", "db", metavar="URL|PATH", envvar=config.ENV_DB, default=None,
        help="Ledger database: a SQLite path or a SQLAlchemy URL (postgresql+psycopg://…). "
             "Env: OMG_LEDGER_DB. Default: ledger.sqlite in the data directory: "
             "$XDG_DATA_HOME/omg-ledger (~/.local/share/omg-ledger) on Linux, "
             "~/Library/Application Support/omg-ledger on macOS.",
    )(f)


def home_option(f: Callable) -> Callable:
    return click.option(
        "--home", "homes", metavar="[LABEL=]DIR", multiple=True,
        help="oh-my-graph home to read (repeatable). Env: OMG_HOME. Default: ~/.oh-my-graph. "
             "LABEL=DIR names the home; the default label is <hostname>:<absolute path> "
             "(<hostname>#<machine id's first 8 characters>:<absolute path> where another machine of "
             "that hostname has a home there). Env OMG_LEDGER_MACHINE=NAME names this machine where its "
             "id and hostname change (a container made anew for every job): NAME then stands for both.",
    )(f)


def json_option(f: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout, nothing else.")(f)


def estimate_options(f: Callable) -> Callable:
    f = click.option("--prices", "prices_file", metavar="FILE", envvar="OMG_LEDGER_PRICES",
                     help="Price book for --estimate (needs it). Env: OMG_LEDGER_PRICES. Default: "
                          "prices.toml in the config directory ($XDG_CONFIG_HOME/omg-ledger on Linux, "
                          "~/Library/Application Support/omg-ledger on macOS), else the one shipped.")(f)
    return click.option("--estimate", is_flag=True,
                        help="Also estimate unpriced invocations from their tokens with the price book "
                             "(shown apart from known spend, never stored).")(f)


def _price_book(estimate: bool, prices_file: str | None):
    if not estimate:
        source = click.get_current_context().get_parameter_source("prices_file")
        if prices_file is not None and source == click.core.ParameterSource.COMMANDLINE:
            # Like --total without --csv: a book given and never read must not pass for no estimate.
            raise BadArgument(f"--prices {prices_file} is the price book of --estimate, which was not given: "
                              f"add --estimate (without it nothing is estimated)")
        return None
    from .prices import load_book

    return load_book(prices_file)


def _now():
    """Now, or the instant in $OMG_LEDGER_NOW (RFC 3339): evaluate relative windows and
    current periods as of another moment (replays, and tests of a fixed corpus)."""
    from datetime import UTC, datetime

    text = os.environ.get(ENV_NOW)
    if not text:
        return datetime.now(UTC)
    from .units import BadTimestamp, parse_timestamp, us_to_instant

    try:
        return us_to_instant(parse_timestamp(text)[1])
    except BadTimestamp:
        raise BadArgument(f"{ENV_NOW}={text!r} is not an RFC 3339 time such as 2026-11-29T20:00:00Z") from None


_Found = TypeVar("_Found")


def _about_ledger(command_kwargs: dict, look: Callable[[str], _Found]) -> _Found | None:
    """``look`` at the command's ledger (its --db) while a failure of it is being shown;
    None when the command has none or the look fails too: the first failure is the one
    to show."""
    if "db" not in command_kwargs:
        return None
    try:
        return look(config.resolve_db(command_kwargs["db"]))
    except Exception:
        return None


def _unreadable_value_of(command_kwargs: dict) -> LedgerError | None:
    """The error naming a value of the command's ledger it cannot read, if it holds one."""
    from .db import unreadable_value

    return _about_ledger(command_kwargs, unreadable_value)


def _ledger_named(command_kwargs: dict) -> str:
    """' <url>' for an error of the command's ledger (a server gone mid-write says which)."""
    from .db import shown_url

    url = _about_ledger(command_kwargs, shown_url)
    return f" {url}" if url else ""


def _a_number_of_seconds(_ctx, param, value: float) -> float:
    """--wait: seconds, 0 or more (`nan`, which no comparison refuses, waited for ever)."""
    if not value >= 0:
        raise click.BadParameter(f"takes a number of seconds >= 0, got {value}", param=param)
    return value


def ledger_errors(f: Callable) -> Callable:
    """Convert library errors into a message and an exit code, once, at the boundary."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        except LedgerError as exc:
            if isinstance(exc.__cause__, Exception) and isinstance(database_trouble(exc.__cause__), DatabaseDamaged):
                exc = database_trouble(exc.__cause__)  # opening found the damage: say what to do
            elif "integer overflow" in str(exc):  # SQLite adding up a hand-edited value
                exc = _unreadable_value_of(kwargs) or exc
            _say_line(f"omg-ledger: error: {_one_line(exc)}")
            sys.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        except (ValueError, TypeError, ArithmeticError):
            # A value no report expects (a user's hand edit: text in an integer column):
            # name it if the ledger holds one; anything else is a bug, and shows as one.
            unreadable = _unreadable_value_of(kwargs)
            if unreadable is None:
                raise
            _say_line(f"omg-ledger: error: {unreadable}")
            sys.exit(unreadable.exit_code)
        except Exception as exc:
            from sqlalchemy.exc import SQLAlchemyError

            if not isinstance(exc, SQLAlchemyError):
                raise
            from .db import one_line

            damaged = database_trouble(exc)
            if isinstance(damaged, (DatabaseDamaged, LedgerBusy)):  # wherever it showed, say what to do
                _say_line(f"omg-ledger: error: {damaged}")
                sys.exit(damaged.exit_code)
            _say_line(f"omg-ledger: error: database{_ledger_named(kwargs)}: {one_line(exc)}")
            sys.exit(EXIT_DATABASE)

    return wrapper


class _Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, `timeout`, a service manager stopping a job) or SIGHUP (the
    terminal closed) in a command that writes the ledger: it ends as Ctrl-C ends it — the
    open transaction rolled back, a sync's workers stopped and their work files removed —
    under its own name and code."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _raise_terminated(signum: int, _frame: object) -> None:
    # Once: a second signal must not cut the clean-up of the first short.
    for ending in _ENDING_SIGNALS:
        signal.signal(ending, signal.SIG_IGN)
    raise _Terminated(signum)


def ends_cleanly_on_signals(f: Callable) -> Callable:
    """SIGTERM and SIGHUP raise _Terminated while ``f`` runs (Python's default would kill
    the process on the spot, leaving a sync's work files and an undocumented exit status)."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            before = {ending: signal.signal(ending, _raise_terminated) for ending in _ENDING_SIGNALS}
        except ValueError:  # not the main thread: the signals are not ours to handle
            return f(*args, **kwargs)
        try:
            return f(*args, **kwargs)
        finally:
            for ending, handler in before.items():
                signal.signal(ending, handler)

    return wrapper


def _interrupted(exc: KeyboardInterrupt) -> NoReturn:
    if isinstance(exc, _Terminated):
        if exc.signum == signal.SIGHUP:
            # Seldom seen (the terminal is gone), but a log of stderr keeps it.
            _to_stderr("omg-ledger: hung up (the terminal closed)")
            sys.exit(EXIT_HUNG_UP)
        _to_stderr("omg-ledger: terminated")
        sys.exit(EXIT_TERMINATED)
    _to_stderr("omg-ledger: interrupted")
    sys.exit(EXIT_INTERRUPTED)


def open_db(db: str | None, option: str = "--db"):
    """A ledger for a command that writes (SQLAlchemy; migrated to the head first);
    ``option`` names it in advice (export's target is --to)."""
    from .db import check_database_target, open_ledger, stderr_say

    check_database_target(config.resolve_db(db, option), option)
    return open_ledger(config.resolve_db(db, option), say=stderr_say, option=option)


def _home_labels(ledger, given) -> tuple[str, ...]:
    """--home of a reading command: labels, or homes' directories, as the ledger's labels."""
    from .reports.homes import home_labels_of

    return home_labels_of(ledger, given)


# Problem lines a sync writes to stderr at most (a stream of garbage must not mail cron
# 50,000 lines); the rest are counted in one line, and all of them are in the ledger.
PROBLEM_LINES = 100

# At most this many values offered at once: a shell lists them all on one TAB.
COMPLETIONS = 200


def _completing_from_ledger(sql: str) -> Callable:
    """A shell_complete callback offering the values ``sql`` reads from the ledger (the one of
    --db, OMG_LEDGER_DB or the default, opened read-only) that start with what was typed.
    No ledger, a damaged one, any error: nothing is offered — completing never fails the shell."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
        from click.shell_completion import CompletionItem

        db = next((c.params.get("db") for c in _with_parents(ctx) if c.params.get("db")), None)
        # A PostgreSQL server that does not answer must not hang the shell (libpq reads it).
        os.environ.setdefault("PGCONNECT_TIMEOUT", "2")
        try:
            from .backend import reading

            with reading(open_db_readonly(db)) as reader:
                values = [value for (value,) in reader.rows(sql)
                          if isinstance(value, str) and value.startswith(incomplete)]
        except Exception:  # noqa: BLE001 - see above
            return []
        return [CompletionItem(value) for value in values[:COMPLETIONS]]

    return complete


def _with_parents(ctx: click.Context | None) -> Iterator[click.Context]:
    while ctx is not None:
        yield ctx
        ctx = ctx.parent


COMPLETE_RUN_IDS = _completing_from_ledger("SELECT DISTINCT run_id FROM runs ORDER BY run_id DESC")
COMPLETE_HOME_LABELS = _completing_from_ledger("SELECT label FROM homes ORDER BY label")
# Not "(no graph)": a shell inserts a completion as it is, and that one needs quoting.
COMPLETE_GRAPHS = _completing_from_ledger(
    "SELECT DISTINCT graph_name FROM runs WHERE graph_name IS NOT NULL ORDER BY graph_name")


def _complete_saved_queries(ctx: click.Context, param: click.Parameter, incomplete: str) -> list:
    from click.shell_completion import CompletionItem

    try:
        from .reports.sql import saved_queries

        names = [q.name for q in saved_queries(ctx.params.get("queries_dir")) if not q.shadowed]
    except Exception:  # noqa: BLE001 - completing never fails the shell
        return []
    return [CompletionItem(name) for name in names if name.startswith(incomplete)]


def graph_option(what: str) -> Callable:
    return click.option("--graph", "graphs", multiple=True, metavar="NAME", shell_complete=COMPLETE_GRAPHS,
                        help=f"{what} (repeatable): its name as `cost --by graph` lists it; "
                             "\"(no graph)\" for plans refused before a graph existed.")


def _graph_names(ledger, given) -> tuple[str, ...]:
    """--graph of a reading command: names some run of the ledger has."""
    if not given:
        return ()
    from .reports.graphs import graph_names_of

    return graph_names_of(ledger, given)


def open_db_readonly(db: str | None, oldest: str | None = None):
    """For commands that only read: never creates, migrates or writes the ledger."""
    from .db import HEAD_REVISION, open_ledger_readonly

    return open_ledger_readonly(config.resolve_db(db), oldest=oldest or HEAD_REVISION)


def _usage_error(exc: click.UsageError, command_path: str) -> NoReturn:
    """One line, as every other error (click's own is a usage block and a blank line)."""
    if isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())):
        # `omg-ledger` or `omg-ledger db` alone (click 8.2+): the help as --help lays it
        # out, not squeezed into one line of \x0a escapes; still exit 2, no command ran.
        _to_stderr(exc.format_message())
        sys.exit(exc.exit_code)
    where = exc.ctx.command_path if exc.ctx is not None else command_path
    _say_line(f"omg-ledger: error: {exc.format_message()} (`{where} --help` says more)")
    sys.exit(exc.exit_code)


class _StatusChoice(click.Choice):
    """Statuses in any case, named in errors and completions as the help and the tables
    write them (click casefolds a case-insensitive choice's names there)."""

    def __init__(self, choices) -> None:
        super().__init__(choices, case_sensitive=False)

    def get_invalid_choice_message(self, value, ctx) -> str:
        return f"{value!r} is not one of {', '.join(self.choices)}."

    def shell_complete(self, ctx, param, incomplete):
        from click.shell_completion import CompletionItem

        return [CompletionItem(c) for c in self.choices if c.lower().startswith(incomplete.lower())]


class _LedgerCommand(click.Command):
    """A command whose --help output failing to be written is said like any output's."""

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        with _parsing():
            ctx = super().make_context(info_name, args, parent, **extra)
        _refuse_empty_values(ctx)
        _refuse_unreadable_times(ctx)
        return ctx


def _refuse_empty_values(ctx: click.Context) -> None:
    """An option typed with an empty value (``--since "$UNSET"``) is a usage error: read
    as the option left out, `cost --since ''` would print all-time spend as if it were
    the window asked for."""
    if ctx.resilient_parsing:  # shell completion: nothing runs
        return
    for param in ctx.command.params:
        if param.type is not click.STRING or getattr(param, "is_flag", False):
            continue
        if ctx.get_parameter_source(param.name) is not click.core.ParameterSource.COMMANDLINE:
            continue  # an empty environment variable is unset, as click reads it
        value = ctx.params.get(param.name)
        if value == "" or (param.multiple and "" in (value or ())):
            if isinstance(param, click.Argument):  # (`show ""` would match every run, `query ""` list them)
                raise click.UsageError(f"{param.human_readable_name} was given an empty value: give one", ctx=ctx)
            name = max(param.opts, key=len)
            rest = "" if param.required else f", or leave {name} out for its default"
            raise click.UsageError(f"{name} was given an empty value: give one{rest}", ctx=ctx)


def _refuse_unreadable_times(ctx: click.Context) -> None:
    """A time option (``--since``, ``--until``, ``--stale-after``: metavar T) that cannot be
    read is a usage error naming the option, before anything is opened."""
    if ctx.resilient_parsing:
        return
    times = [(param, ctx.params.get(param.name)) for param in ctx.command.params
             if isinstance(param, click.Option) and param.metavar == "T" and ctx.params.get(param.name)]
    if not times:
        return
    from datetime import UTC

    from .timespec import parse_time

    for param, value in times:
        try:
            parse_time(value, zone=UTC)  # (the zone changes which instant, never whether it reads)
        except BadArgument as exc:
            raise click.UsageError(f"{max(param.opts, key=len)}: {exc}", ctx=ctx) from None


class _LedgerGroup(click.Group):
    """The top-level group: Ctrl-C, database damage and a stdout that cannot be written
    end any command in one line."""

    command_class = _LedgerCommand
    group_class = type  # db, homes: this class too

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        try:
            with _parsing():
                return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:  # an option of its own (omg-ledger --bogus)
            _usage_error(exc, info_name or "omg-ledger")
        except _OutputFailed as exc:
            _output_failed(exc)

    def invoke(self, ctx: click.Context):
        try:
            try:
                result = super().invoke(ctx)
            except SystemExit:
                _flush_stdout()  # the output of a command ending with its own exit code
                raise
            _flush_stdout()  # here, not at the interpreter's exit, where a failure is a traceback
            return result
        except _OutputFailed as exc:
            _output_failed(exc)
        except click.UsageError as exc:
            _usage_error(exc, ctx.command_path)
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        except Exception as exc:
            # Only a database error that reached here is ours to word; a command that
            # never touched the database (--help) must not pay for importing SQLAlchemy.
            if type(exc).__module__.split(".")[0] != "sqlalchemy":
                raise
            from sqlalchemy.exc import DBAPIError

            if not isinstance(exc, DBAPIError):
                raise
            error = database_trouble(exc)
            _say_line(f"omg-ledger: error: {error}")
            sys.exit(error.exit_code)


@click.group(cls=_LedgerGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(version=VERSION, prog_name="omg-ledger")
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
@click.option("--strict", is_flag=True,
              help="Exit 1 when this sync recorded problems in what it read (default: exit 0 once the sync "
                   "completed). Problems left open by earlier syncs do not count: `omg-ledger problems` lists them.")
@click.option("--wait", "wait_seconds", type=float, callback=_a_number_of_seconds,
              default=60.0, show_default=True, metavar="S",
              help="Seconds to wait for another sync holding the ledger before giving up (exit 75).")
@click.option("--invocations", "invocation_files", metavar="PATH", multiple=True, envvar=config.ENV_INVOCATIONS,
              help="Also index a runner's role-invocation events.jsonl (repeatable). Env: OMG_LEDGER_INVOCATIONS "
                   "(several paths separated by spaces).")
@click.option("--relabel", is_flag=True,
              help="Let a --home LABEL=DIR whose label holds another directory point at DIR instead.")
@click.option("--workers", type=click.IntRange(min=0), default=None, metavar="N",
              help="Processes that read and derive new runs beside the one writing the ledger. "
                   "Default: one per CPU when a home has 100 or more new runs; 0: none.")
@ledger_errors
@ends_cleanly_on_signals
def sync(db, homes, as_json, strict, wait_seconds, invocation_files, relabel, workers) -> None:
    """Index oh-my-graph run directories into the ledger.

    Reads <home>/runs/* and <home>/plans/* read-only; only new complete stream lines
    and changed files are read, so running it every few minutes from cron is cheap.
    Problems in the input are listed on stderr (the first 100, then how many more) and
    kept in the ledger's problems table, every one.
    Runs whose rows were derived by an older omg-ledger are then re-derived from the
    ledger's stored facts (gone runs included), so a corrected rule reaches all history.

    \b
    Example:
      omg-ledger sync --home ~/.oh-my-graph --json
    Exit codes: 0 done; 1 done with problems (--strict only); 2 usage (a home that is
    not there and was never indexed on this machine, a label that names another home);
    3 database trouble (a ledger removed while the sync ran too);
    75 another sync holds the ledger for longer than --wait, a worker process was
    killed, or the sync ran out of memory or open files (runs committed so far are
    kept: sync again); 130 Ctrl-C, 143 SIGTERM, 129 the terminal closed
    (the open batch rolled back, runs committed so far kept).
    """
    from .change_check import unchanged_sync
    from .db import HEAD_REVISION, check_sqlite_target
    from .version import DERIVATION_VERSION

    progress = render.progress_bar() if (_is_terminal(sys.stderr) and not as_json) else None
    resolved_homes = config.resolve_homes(homes)
    if invocation_files and not homes and not os.environ.get(config.ENV_HOME):
        # Runner streams alone asked for: the default home is synced only where there is one.
        resolved_homes = [home for home in resolved_homes if os.path.isdir(home.path)]
    for path in invocation_files:
        require_utf8(os.path.abspath(path), f"--invocations {path}")
    report = None
    check_sqlite_target(config.resolve_db(db))  # before a lock file is made beside another program's file
    if not invocation_files:
        # The cron case, without SQLAlchemy: a SQLite or PostgreSQL ledger at the head where nothing changed.
        report = unchanged_sync(config.resolve_db(db), resolved_homes, head_revision=HEAD_REVISION,
                                derivation_version=DERIVATION_VERSION, wait_seconds=wait_seconds)
    if report is None:
        from .sync import refuse_missing_homes_of_a_new_ledger
        from .sync import sync as run_sync

        refuse_missing_homes_of_a_new_ledger(config.resolve_db(db), resolved_homes)
        engine = open_db(db)
        report = run_sync(engine, resolved_homes, invocation_files=list(invocation_files),
                          wait_seconds=wait_seconds, progress=progress, relabel=relabel, workers=workers)
    if progress is not None:
        progress.close()
    for problem in report.problems[:PROBLEM_LINES]:
        _say_line(f"omg-ledger: problem: {problem.path} at byte {problem.offset}: {problem.reason}")
    if len(report.problems) > PROBLEM_LINES:
        _say_line(f"omg-ledger: ... and {len(report.problems) - PROBLEM_LINES:,} more problem(s): "
                  f"`omg-ledger problems` lists every one")
    if as_json:
        _emit_json(report.as_dict())
    elif _is_terminal(sys.stdout):
        import shutil

        width = shutil.get_terminal_size((80, 24)).columns
        for moved in report.moved_homes:
            _say(render.wrap(render.inert(f"home {moved['home']} is at {moved['to']} now (synced at {moved['from']} "
                                          f"before): its runs, streams and problems follow it"), width))
        for linked in report.symlinked_dirs:
            # Made inert before wrapping, so the escapes are what is measured.
            _say(render.wrap(render.inert(f"{linked['dir']} is a symlink: read in {linked['resolved']} "
                                          f"(engine-id-named directories only)"), width))
        _say(render.wrap(render.sync_summary(report), width))
    if strict and report.problems:
        sys.exit(EXIT_PROBLEMS)


@main.command()
@db_option
@json_option
@click.option("--run", "run_ids", multiple=True, metavar="RUN_ID", shell_complete=COMPLETE_RUN_IDS,
              help="Only this run (repeatable; a run id, or a unique prefix of one as show takes it).")
@click.option("--wait", "wait_seconds", type=float, callback=_a_number_of_seconds,
              default=60.0, show_default=True, metavar="S",
              help="Seconds to wait for a sync holding the ledger before giving up (exit 75).")
@ledger_errors
@ends_cleanly_on_signals
def rebuild(db, as_json, run_ids, wait_seconds) -> None:
    """Re-derive runs from the facts stored in the ledger; no home is read.

    Every derived row (legs, nodes, rounds, charges, findings, goal cycles, a run's
    totals, paired invocations) is a function of the stored stream lines, JSON files
    and directory facts. `sync` re-derives by itself whatever an older omg-ledger
    derived; rebuild does it on demand for every run (or those given), even when
    their directories are gone.

    \b
    Example:
      omg-ledger rebuild --json
      omg-ledger rebuild --run 20261129-181518.678721711-1
    Exit codes: 0 done; 2 no such run (or another usage error); 3 database trouble;
    75 the ledger is busy, or out of memory; 130 Ctrl-C, 143 SIGTERM, 129 the terminal
    closed (runs re-derived so far kept).
    """
    from .reports.runs import resolve_run_ids
    from .sync import rebuild as run_rebuild

    engine = open_db(db)
    progress = render.progress_bar() if (_is_terminal(sys.stderr) and not as_json) else None
    report = run_rebuild(engine, resolve_run_ids(engine, run_ids), wait_seconds=wait_seconds, progress=progress)
    if progress is not None:
        progress.close()
    if as_json:
        _emit_json(report.as_dict())
    else:
        _say(f"re-derived {report.runs_rederived} run(s) and {report.streams_rederived} invocation "
                   f"stream(s) from stored facts in {report.seconds:.1f}s")


@main.command()
@db_option
@json_option
@click.option("--since", metavar="T", help="Only runs with an event since T (30m, 12h, 7d, 2w, 3mo, 1y, today, "
                                          "yesterday, 2026-11-01, RFC 3339).")
@click.option("--status", "statuses", multiple=True, metavar="S",
              type=_StatusChoice(STATUSES),
              help=f"Only runs with this status (repeatable): {', '.join(STATUSES)}.")
@click.option("--home", "home_labels", multiple=True, metavar="LABEL", shell_complete=COMPLETE_HOME_LABELS,
              help="Only runs held in this home: its label or its directory (this machine's home there) "
                   "(repeatable). A run copied into several homes is listed once, under the home whose copy "
                   "is billed.")
@graph_option("Only runs of this graph")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV on stdout (header row first; the --json row's fields).")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="At most N runs (the newest).")
@tz_option
@estimate_options
@ledger_errors
def runs(db, as_json, since, statuses, home_labels, graphs, as_csv, limit, tz, estimate, prices_file) -> None:
    """List runs, newest first, with their status probed live.

    \b
    Example:
      omg-ledger runs --since 2d --status ABANDONED --status PAUSED
      omg-ledger runs --since yesterday --csv --limit 50 > runs.csv
      omg-ledger runs --graph nightly-refactor --status FAIL
    A cost with unpriced work beside it is a lower bound ("≥ $1.20 +3 unpriced").
    """
    import itertools

    from .db import RUN_TABLES_SINCE
    from .reports.runs import iter_runs

    if as_json and as_csv:
        raise BadArgument("--json and --csv are exclusive: choose one")
    zone = since_us = None
    if tz or since:  # a zone is only read for these (timespec and zoneinfo cost ~10 ms to import)
        from .timespec import parse_since, zone_named

        zone = zone_named(tz)
        since_us = parse_since(since, _now(), zone)
    engine = open_db_readonly(db, RUN_TABLES_SINCE)
    rows = iter_runs(engine, since_us=since_us, statuses=tuple(s.upper() for s in statuses),
                     home_labels=_home_labels(engine, home_labels), graphs=_graph_names(engine, graphs))
    if limit is not None:
        rows = itertools.islice(rows, limit)
    prices = _price_book(estimate, prices_file)
    if prices is not None:
        from .reports.estimate import by_run, with_usd, zero

        estimates, none = by_run(engine, prices), with_usd(zero())
        rows = ({**row, **estimates.get((row["home"], row["run_id"]), none)} for row in rows)
    if as_json:
        _emit_json_array(rows)
    elif as_csv:
        _say(render.runs_csv(rows, prices is not None), nl=False)
    else:
        # The table makes every cell inert itself, then adds its own colour codes.
        table = render.runs_table(list(rows), zone=zone if tz else None, filtered=bool(since or statuses or home_labels or graphs),
                                  **render.terminal_options(_stdout()))
        with _writing_stdout():
            click.echo(table)
        if prices is not None:
            _say(render.price_book_line(prices.describe()))


@main.command()
@db_option
@json_option
@click.argument("run_id", shell_complete=COMPLETE_RUN_IDS)
@click.option("--home", "home_label", metavar="LABEL", shell_complete=COMPLETE_HOME_LABELS,
              help="The home (its label, or its directory: this machine's home there) to take the run from, "
                   "where one run id names different runs in two homes.")
@tz_option
@estimate_options
@ledger_errors
def show(db, as_json, run_id, home_label, tz, estimate, prices_file) -> None:
    """Show one run: legs, nodes, rounds, charges, findings, problems, status.

    RUN_ID may be a unique prefix. A run copied into several homes is one run: its
    billed copy is shown (with the homes holding the others). The status is read
    now, from the run's lock and stream; everything else is as of the last sync, and
    show says when the run's events.jsonl has changed since.

    \b
    Example:
      omg-ledger show 20261129-181518.6            # a prefix that names one run is enough
      omg-ledger show 20261129-181518.678721711-1 --home laptop   # one id in two homes
    """
    from .db import RUN_TABLES_SINCE
    from .reports.runs import show_run
    from .timespec import zone_named

    require_utf8(run_id, f"run id {run_id!r}")
    zone = zone_named(tz) if tz else None
    engine = open_db_readonly(db, RUN_TABLES_SINCE)
    labels = _home_labels(engine, (home_label,) if home_label is not None else ())
    if len(labels) > 1:
        raise BadArgument(f"--home {home_label!r} is the directory of {len(labels)} homes "
                          f"({', '.join(labels)}): give one's label")
    detail = show_run(engine, run_id, labels[0] if labels else None)
    prices = _price_book(estimate, prices_file)
    if prices is not None:
        from .reports.estimate import annotate_run

        annotate_run(detail, prices)
    if as_json:
        _emit_json(detail)
    else:
        _say(render.run_detail(detail, zone))


@main.command()
@db_option
@json_option
@click.option("--all", "include_resolved", is_flag=True, help="Also list problems a later sync found resolved.")
@ledger_errors
def problems(db, as_json, include_resolved) -> None:
    """List the input problems sync recorded (bad lines, unreadable files): open ones.

    A problem is resolved when a later sync re-reads its file, directory or home and does
    not see it again; seen again, it is open again. A problem is its machine's (the one
    whose sync found it): another machine's sync of a home at the same path never
    resolves it. `audit` counts open problems.

    \b
    Example:
      omg-ledger problems
      omg-ledger problems --all --json
    """
    from .db import RUN_TABLES_SINCE
    from .reports.problems import list_problems

    found = list_problems(open_db_readonly(db, RUN_TABLES_SINCE), include_resolved=include_resolved)
    if as_json:
        _emit_json(found)
    else:
        _say(render.problems_text(found, include_resolved))


@main.group(name="homes", invoke_without_command=True)
@db_option
@json_option
@click.pass_context
@ledger_errors
def homes_group(ctx, db, as_json) -> None:
    """The homes this ledger indexes: label, path, runs, last sync.

    A home is its real directory (machine, device and inode), not its label: the same
    directory synced through a symlink, without its label or after a hostname change
    is the same home, and a run copied into another home is billed once.

    \b
    Example:
      omg-ledger homes
      omg-ledger homes rename laptop:/home/me/.oh-my-graph laptop
      omg-ledger homes forget old-box --yes
    """
    if ctx.invoked_subcommand is not None:
        return
    from .db import RUN_TABLES_SINCE
    from .reports.homes import list_homes

    rows = list_homes(open_db_readonly(db, RUN_TABLES_SINCE))
    if as_json:
        _emit_json(rows)
        return
    _say(render.table(
        ["HOME", "PATH", "RUNS", "GONE", "BILLED ELSEWHERE", "LAST SYNC"],
        [[r["label"], _home_path_shown(r), str(r["runs"]), str(r["gone"]), str(r["copies_elsewhere"]),
          render.when(r["last_synced_at"]) if r["last_synced_at"] else "never"] for r in rows], right={2, 3, 4}))


def _home_path_shown(row: dict) -> str:
    shown = row["path"] if row["real_path"] in (None, row["path"]) else f"{row['path']} -> {row['real_path']}"
    if row["runs_dir"] is not None and row["runs_dir"] not in (
            os.path.join(row["path"], "runs"), os.path.join(row["real_path"] or row["path"], "runs")):
        shown += f" (runs/ -> {row['runs_dir']})"  # a symlinked runs/, read where it leads
    return shown


@homes_group.command(name="rename")
@db_option
@click.argument("old", shell_complete=COMPLETE_HOME_LABELS)
@click.argument("new")
@ledger_errors
def homes_rename(db, old, new) -> None:
    """Give a home another label (its runs and history stay).

    \b
    Example:
      omg-ledger homes rename laptop:/home/me/.oh-my-graph laptop
    """
    from .reports.homes import rename_home

    require_utf8(old, f"home label {old!r}")
    require_utf8(new, f"home label {new!r}")
    rename_home(open_db(db), old, new)
    _say(f"home {old} is now {new}")


@homes_group.command(name="forget")
@db_option
@click.argument("label", shell_complete=COMPLETE_HOME_LABELS)
@click.option("--yes", is_flag=True, help="Really remove the home and every run of it from the ledger.")
@ledger_errors
def homes_forget(db, label, yes) -> None:
    """Remove a home and all its runs from the ledger (the directory is not touched).

    Its history goes with it: runs whose directories are gone exist only in the ledger.

    \b
    Example:
      omg-ledger homes forget old-box --yes
    """
    from .reports.homes import forget_home

    require_utf8(label, f"home label {label!r}")
    if not yes:
        from .db import RUN_TABLES_SINCE
        from .reports.homes import home_labelled

        home = home_labelled(open_db_readonly(db, RUN_TABLES_SINCE), label)
        raise BadArgument(f"forgetting {label!r} ({home['path']}) removes its {home['runs']} run(s) from the ledger "
                          f"for good; add --yes to do it")
    count = forget_home(open_db(db), label)
    _say(f"forgot home {label} and its {count} run(s)")


@main.group(name="db")
def db_group() -> None:
    """Ledger database migrations (alembic).

    `sync` migrates the ledger it opens; reading commands never do, and ask for
    `db upgrade` when the ledger is older than they read.

    \b
    Example:
      omg-ledger db current                  # the ledger's revision and this omg-ledger's
      omg-ledger db upgrade --db postgresql+psycopg://ledger@db.internal/ledger
    """


@db_group.command(name="upgrade")
@db_option
@ledger_errors
def db_upgrade(db) -> None:
    """Bring the ledger database to the newest schema (sync does this too; reading commands never do).

    \b
    Example:
      omg-ledger db upgrade --db postgresql+psycopg://ledger@db.internal/ledger
    """
    from .db import stored_revision

    _say(f"ledger database at revision {stored_revision(open_db(db))} (head)")


@db_group.command(name="current")
@db_option
@ledger_errors
def db_current(db) -> None:
    """Print the ledger database's revision and this omg-ledger's head, without changing anything.

    \b
    Example:
      omg-ledger db current --db ~/.local/share/omg-ledger/ledger.sqlite
    """
    from .db import HEAD_REVISION, open_ledger_readonly, stored_revision

    current = stored_revision(open_ledger_readonly(config.resolve_db(db), oldest=None))
    _say(f"current: {current or '(empty database)'}\nhead:    {HEAD_REVISION}")


@main.command()
@db_option
@json_option
@click.option("--csv", "as_csv", is_flag=True, help="Print the per-group rows as CSV on stdout.")
@click.option("--since", metavar="T", help="Only invocations started since T. " + SINCE_HELP.split(": ", 1)[1])
@click.option("--by", "by", type=click.Choice(["role", "status", "milestone"], case_sensitive=False), default="role",
              show_default=True,
              help="Group by role, end status or milestone.")
@tz_option
@ledger_errors
def invocations(db, as_json, as_csv, since, by, tz) -> None:
    """Role invocations of runners: counts, failures, durations, who is working now.

    Reads what `omg-ledger sync --invocations PATH` indexed from a runner's
    events.jsonl. A failure is an end whose status is neither a success (DONE, GO,
    SUCCESS, OBSERVED, READY, ACCEPT) nor a judged verdict (BLOCKED, NEEDS_DEEP,
    NO-GO, NEEDS_CONFIRMATION). Percentiles are nearest-rank. Dangling starts (no end
    yet) are listed whatever --since says, with the machine whose stream holds them
    where starts of several machines are listed.

    \b
    Example:
      omg-ledger sync --invocations ~/proj/.ledger/events.jsonl
      omg-ledger invocations --since 7d --by status
      omg-ledger invocations --since today --tz Europe/Berlin
    """
    from .db import INVOCATIONS_SINCE
    from .errors import BadArgument
    from .reports.invocations import invocation_report, to_csv, to_text
    from .timespec import parse_since, zone_named

    if as_json and as_csv:
        raise BadArgument("--json and --csv are exclusive: choose one")
    now = _now()
    zone = zone_named(tz)
    report = invocation_report(open_db_readonly(db, INVOCATIONS_SINCE), now=now, by=by,
                               since_us=parse_since(since, now=now, zone=zone))
    if as_json:
        _emit_json(report)
    elif as_csv:
        _say(to_csv(report), nl=False)
    else:
        _say(to_text(report, zone if tz else None))


def csv_option(f: Callable) -> Callable:
    return click.option("--csv", "as_csv", is_flag=True, help="Print CSV on stdout (header row first).")(f)


def _emit(value, as_json: bool, as_csv: bool, to_csv: Callable, to_text: Callable) -> None:
    if as_json and as_csv:
        raise BadArgument("--json and --csv are exclusive: choose one")
    if as_json:
        _emit_json(value)
    else:
        _say(to_csv(value) if as_csv else to_text(value), nl=not as_csv)


@main.command()
@db_option
@json_option
@csv_option
@click.option("--since", metavar="T", help=SINCE_HELP)
@click.option("--until", metavar="T", help="End of the window (exclusive). Default: now when --since is given.")
@click.option("--by", type=click.Choice(["day", "week", "month", "run", "node", "graph", "runtime", "home", "goal",
                                         "leg-kind"], case_sensitive=False),
              help="Group rows; without it only the total is shown.")
@click.option("--tz", metavar="ZONE", help="IANA zone for periods and dates without an offset. Default: local zone.")
@click.option("--home", "home_labels", multiple=True, metavar="LABEL", shell_complete=COMPLETE_HOME_LABELS,
              help="Only spend billed to this home: its label or its directory (this machine's home there) "
                   "(repeatable). A run copied into several homes is billed to the home of its billed copy.")
@graph_option("Only spend of runs of this graph")
@estimate_options
@click.option("--chart", is_flag=True, help="Draw a bar per row (needs --by), fitted to the terminal width ($COLUMNS).")
@click.option("--total", "with_total", is_flag=True, help="With --csv: end with a row keyed TOTAL.")
@ledger_errors
def cost(db, as_json, as_csv, since, until, by, tz, home_labels, graphs, estimate, prices_file, chart,
         with_total) -> None:
    """Spend, tokens, invocations and unpriced invocations, per group and in total.

    Each charge counts at its own time; --since 7d is the last 7×24 h. Days and weeks
    (from Monday) and months are cut in --tz, DST included. A group with unpriced work
    (Codex, killed calls) shows a lower bound: "≥ $12.40 +3 unpriced". Node keys are
    <graph>/<node id>; graph keys the graph's name, or "(no graph)"; home keys the label
    of the home holding the run's billed copy; goal keys the goal's first run id, or
    "(no goal)". JSON gives cost_nano_usd exactly and cost_usd as a number (at most 9
    decimals).

    --estimate prices unpriced invocations that carry tokens with the price book and
    shows three figures: known spend, the estimate, and how many could not be
    estimated. The estimate is never added to known spend nor stored.

    \b
    Example:
      omg-ledger cost --since 7d --by day --tz Europe/Berlin
      omg-ledger cost --since 2026-11-01 --until 2026-12-01 --by runtime --json
      omg-ledger cost --since 7d --by runtime --estimate
      omg-ledger cost --since 30d --by day --chart
      omg-ledger cost --since 7d --by graph
      omg-ledger cost --since 30d --by day --graph nightly-refactor
    """
    from .db import RUN_TABLES_SINCE
    from .reports.cost import cost_report

    if chart and (as_json or as_csv or not by):
        raise BadArgument("--chart draws the rows of --by on a terminal: give --by, and not --json or --csv")
    engine = open_db_readonly(db, RUN_TABLES_SINCE)
    report = cost_report(engine, since=since, until=until, by=by, tz=tz, home_labels=_home_labels(engine, home_labels),
                         now=_now(), prices=_price_book(estimate, prices_file), graphs=_graph_names(engine, graphs))
    if chart:
        _emit_chart(report)
        return
    if with_total and not as_csv:
        raise BadArgument("--total adds a TOTAL row to --csv; give --csv (the text and --json always hold the total)")
    width = render.terminal_width(_stdout())
    _emit(report, as_json, as_csv, lambda r: render.cost_csv(r, with_total), lambda r: render.cost_text(r, width=width))


def _emit_chart(report: dict) -> None:
    import codecs
    import shutil

    encoding = getattr(_stdout(), "encoding", None) or "ascii"
    try:
        unicode = codecs.lookup(encoding).name == "utf-8"
    except LookupError:
        unicode = False
    _say(render.cost_chart(report, shutil.get_terminal_size((80, 24)).columns, unicode))


def limit_options(f: Callable) -> Callable:
    f = click.option("--tz", metavar="ZONE", help="IANA zone days, weeks and months are cut in (the limit periods, and "
                          "the report's days) and dates without an offset are read in. Default: local zone.")(f)
    return click.option("--limit", "limit_specs", multiple=True, metavar="[SCOPE/]PERIOD=USD",
                        help="A spend limit (repeatable): day=50, month=800, graph:NAME/day=5, runtime:codex/week=100, "
                             "node:GRAPH/NODE/day=1 (node:\"GRAPH\"/NODE/day=1 when GRAPH/NODE is two nodes' key: "
                             "names may hold /). Added to the [limits] of config.toml in the config directory "
                             "($XDG_CONFIG_HOME/omg-ledger on Linux, ~/Library/Application Support/omg-ledger "
                             "on macOS; env OMG_LEDGER_CONFIG).")(f)


def _check_limits(engine, limit_specs, tz, prices, required: bool):
    """The limits report, or None when no limit is set anywhere (and none is required)."""
    from .limits import config_path, resolve_limits

    limits = resolve_limits(limit_specs)
    if not limits:
        if required:
            raise BadArgument(f"no spend limits: give --limit (e.g. day=50) or a [limits] table in {config_path()}")
        return None
    # Its price book and cost report are imported only when a limit is set.
    from .reports.limits import check_limits

    return check_limits(engine, limits, tz=tz, now=_now(), prices=prices)


@main.command()
@db_option
@json_option
@limit_options
@estimate_options
@ledger_errors
def limits(db, as_json, limit_specs, tz, estimate, prices_file) -> None:
    """Check spend limits: spend so far in each limit's current period, one line per breach first.

    Periods (day, week from Monday, month) are cut in --tz like `cost --by day`. A limit is
    exceeded when known spend is above it, or, with --estimate, known spend plus the estimate
    for unpriced work. Limits come from --limit and the [limits] table of
    config.toml in the config directory (~/.config/omg-ledger on Linux; env
    OMG_LEDGER_CONFIG). Exit 1 when one is exceeded.

    \b
    Example:
      omg-ledger limits --limit day=50 --limit graph:nightly-refactor/day=5 --tz Europe/Berlin
      omg-ledger limits --limit day=50 --estimate || notify-someone
    """
    from .db import RUN_TABLES_SINCE

    engine = open_db_readonly(db, RUN_TABLES_SINCE)
    report = _check_limits(engine, limit_specs, tz, _price_book(estimate, prices_file), required=True)
    _emit(report, as_json, False, str, render.limits_text)
    sys.exit(EXIT_ATTENTION if report["exceeded"] else 0)


@main.command()
@db_option
@json_option
@click.option("--since", metavar="T", help="Only runs with an event since T (30m, 12h, 7d, 2w, 3mo, 1y, today, "
                                          "yesterday, 2026-11-01, RFC 3339).")
@limit_options
@estimate_options
@click.option("--verbose", is_flag=True, help=f"List every FAIL (without it: the {AUDIT_NEWEST_FAILS} newest of each "
              "kind, and how many) and every run whose passes are all self-reported or exit-only.")
@click.option("--stale-after", metavar="T", help="A home whose last completed sync is older than T (2h, 1d, or a "
              "time as --since takes) needs attention: a sync that stopped (a cron job that broke) leaves every "
              "total behind.")
@ledger_errors
def audit(db, as_json, since, limit_specs, tz, estimate, prices_file, verbose, stale_after) -> None:
    """One report: PASS provenance, judged vs machinery FAILs (and FAILs state.json holds
    no record of, whose judged field the engine never wrote), budget overruns,
    ABANDONED and PAUSED runs (probed live), findings, input problems, build evidence
    of auto runs, unpriced work.

    Exit status 1 means something needs attention: an ABANDONED or PAUSED run, a budget
    overrun, a reconciliation finding, an open input problem or an exceeded spend limit
    (--limit, or the [limits] of config.toml in the config directory). The verdict line is
    the first line, spend-limit breaches next. --since narrows every section except the
    ABANDONED and PAUSED runs: every one of those is listed, however old. Unverified passes and unpriced work are reported
    but do not set it. --stale-after 2h also makes a home not synced in the last two hours
    need attention. --estimate also prices unpriced work (and counts it toward limits).

    \b
    Example:
      omg-ledger audit --since 1d || notify-someone
      omg-ledger audit --since 1d --limit day=50 --limit month=800 --tz Europe/Berlin
      omg-ledger audit --since 1d --stale-after 2h || notify-someone
    """
    import contextlib

    from .db import RUN_TABLES_SINCE
    from .reports.audit import audit_report, audit_streamed
    from .timespec import zone_named

    engine = open_db_readonly(db, RUN_TABLES_SINCE)
    now = _now()
    prices = _price_book(estimate, prices_file)
    with contextlib.ExitStack() as stack:
        if as_json:
            report = audit_report(engine, since=since, now=now, zone=zone_named(tz), stale_after=stale_after)
        else:  # the text of 10,000 runs is written while it is read (audit_streamed)
            report = stack.enter_context(audit_streamed(engine, since=since, now=now, zone=zone_named(tz),
                                                        newest_fails=None if verbose else AUDIT_NEWEST_FAILS,
                                                        stale_after=stale_after))
        if prices is not None:
            from .reports.cost import cost_report

            total = cost_report(engine, since=since, tz=tz, now=now, prices=prices)["total"]
            report["unknown_cost"]["estimate"] = {k: total[k] for k in (
                "estimated_nano_usd", "estimated_usd", "estimated_invocations", "unestimated_invocations",
                "unestimated_reasons")}
            report["price_book"] = prices.describe()
        limits_report = _check_limits(engine, limit_specs, tz, prices, required=False)
        if limits_report is not None:
            report["limits"] = limits_report
            if limits_report["exceeded"]:
                report["attention"].insert(0, f"{len(limits_report['breaches'])} spend limit(s) exceeded")
                report["needs_attention"] = True
        if as_json:
            _emit_json(report)
        else:
            _say_lines(render.audit_lines(report, verbose, zone_named(tz) if tz else None),
                       colour=render.use_colour(_stdout()))
    sys.exit(EXIT_ATTENTION if report["needs_attention"] else 0)


@main.command()
@db_option
@click.option("--html", "html_file", required=True, metavar="FILE",
              help="Write the report to FILE (one self-contained HTML file, written atomically).")
@click.option("--since", metavar="T", help=SINCE_HELP)
@click.option("--until", metavar="T", help="End of the window (exclusive). Default: now when --since is given.")
@limit_options
@estimate_options
@ledger_errors
def report(db, html_file, since, until, limit_specs, tz, estimate, prices_file) -> None:
    """Write one HTML page to look at: spend per day by runtime, top graphs and nodes,
    status mix, unpriced share, redone work, ABANDONED/PAUSED runs, problems, limits.

    The file needs no network and no script (inline CSS and SVG): open it offline or
    mail it from cron. With --estimate the estimated part of each day is drawn hatched.

    \b
    Example:
      omg-ledger report --html /tmp/omg.html --since 30d --tz Europe/Berlin --estimate
    """
    from .db import RUN_TABLES_SINCE
    from .files import write_atomic
    from .htmlpage import render
    from .reports.overview import overview

    engine = open_db_readonly(db, RUN_TABLES_SINCE)
    prices = _price_book(estimate, prices_file)
    limits_report = _check_limits(engine, limit_specs, tz, prices, required=False)
    data = overview(engine, since=since, until=until, tz=tz, now=_now(), prices=prices, limits=limits_report)
    write_atomic(html_file, render(data))


@main.command()
@db_option
@click.option("--output", "output", metavar="FILE",
              help="Write to FILE atomically (temp file + rename in its directory) instead of stdout.")
@ledger_errors
def metrics(db, output) -> None:
    """Prometheus text exposition of the ledger, for node_exporter's textfile collector.

    Known spend, invocations and unpriced invocations by runtime and graph; runs by live
    status; ABANDONED runs; open input problems; the newest event's time; when each
    home's last sync completed. All gauges, over all time.

    \b
    Example:
      */5 * * * * omg-ledger sync && omg-ledger metrics --output /var/lib/node_exporter/omg.prom
    """
    from .db import RUN_TABLES_SINCE
    from .reports.metrics import collect, exposition

    text = exposition(collect(open_db_readonly(db, RUN_TABLES_SINCE)))
    if output:
        from .files import write_atomic

        write_atomic(output, text)
    else:
        out = _stdout()
        binary = getattr(out, "buffer", None)
        with _writing_stdout():
            if binary is None:
                out.write(text)
                return
            # The exposition format is UTF-8 whatever the locale says, as a --output file is.
            out.flush()
            binary.write(text.encode("utf-8"))


SQL_TIMEOUT_S = 60.0


def timeout_option(f: Callable) -> Callable:
    return click.option("--timeout", "timeout", type=click.FloatRange(min=0), default=SQL_TIMEOUT_S,
                        show_default=True, metavar="S",
                        help="Stop the statement after S seconds (exit 2); 0: no limit. Ctrl-C stops it at once.")(f)


@main.command()
@db_option
@json_option
@csv_option
@timeout_option
@click.argument("statement")
@ledger_errors
def sql(db, as_json, as_csv, timeout, statement) -> None:
    """Run one read-only SQL statement against the ledger.

    Anything that would write (INSERT, UPDATE, DELETE, CREATE, DROP, ATTACH, a PRAGMA
    assignment, several statements, COMMIT or SET) is refused and nothing changes
    (exit 2); a typo is reported as the database's syntax error. The
    v_charges, v_runs, v_nodes, v_node_rounds, v_problems, v_findings and v_invocations views are the
    stable names to query. A statement still running after --timeout seconds is
    stopped (exit 2); Ctrl-C stops it at once (exit 130). A statement that starts
    with "-" (a comment) goes after "--", which ends the options.

    \b
    Example:
      omg-ledger sql "SELECT runtime, SUM(cost_nano_usd) FROM v_charges GROUP BY runtime"
      omg-ledger sql --json -- "-- runs per state
      SELECT ledger_state, COUNT(*) FROM v_runs GROUP BY 1"
    """
    from .db import VIEWS_SINCE
    from .reports.sql import run_sql

    result = run_sql(open_db_readonly(db, VIEWS_SINCE), statement, timeout=timeout).as_dict()
    _emit(result, as_json, as_csv, render.sql_csv, render.sql_text)


@main.command(add_help_option=False)
@db_option
@json_option
@csv_option
@click.option("--list", "listing", is_flag=True, help="One line per saved query: name, summary, parameters.")
@click.option("--describe", is_flag=True, help="Describe the saved query NAME (the same as NAME --help).")
@click.option("--queries", "queries_dir", metavar="DIR",
              help="Your own saved queries (*.sql), listed beside the shipped ones. "
                   "Default: queries/ in the config directory ($XDG_CONFIG_HOME/omg-ledger on Linux, "
                   "~/Library/Application Support/omg-ledger on macOS).")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="Bind :NAME (repeatable). since/until take the --since grammar; limit a whole number.")
@tz_option
@timeout_option
@click.option("-h", "--help", "show_help", is_flag=True, help="Show this message and exit; with NAME, describe that query.")
@click.argument("name", required=False, shell_complete=_complete_saved_queries)
@click.pass_context
@ledger_errors
def query(ctx, db, as_json, as_csv, listing, describe, queries_dir, params, tz, timeout, show_help, name) -> None:
    """Run a saved query read-only, list them with --list, describe one with NAME --help.

    Saved queries are the shipped ones plus your own *.sql files in --queries DIR
    (default: queries/ in the config directory). A query of yours with a shipped query's
    name is listed but never run: rename it.

    \b
    Example:
      omg-ledger query --list
      omg-ledger query spend_by_day --help
      omg-ledger query spend_by_day --param since=2026-11-01
    """
    from .reports.sql import parse_params, run_saved, saved_queries, saved_query

    if queries_dir is not None and not os.path.exists(queries_dir):
        # Named on purpose: a typo must not list the shipped queries alone as if yours were none.
        raise BadArgument(f"--queries {queries_dir}: no such directory")
    if show_help and not name:
        _stdout()
        with _writing_stdout():
            click.echo(ctx.get_help())
        return
    if (show_help or describe) and name:
        _say(render.saved_query_detail(saved_query(name, queries_dir)))
        return
    if describe:
        raise BadArgument("--describe needs a query NAME (omg-ledger query --list names them)")
    if listing or not name:
        queries = saved_queries(queries_dir)
        if as_json:
            _emit_json([{"name": q.name, "summary": q.one_line, "origin": q.origin, "path": q.path or None,
                         "shadowed": q.shadowed,
                         "params": [{"name": p.name, "description": p.description, "default": p.default}
                                    for p in q.params]} for q in queries])
        else:
            _say(render.saved_queries_list(queries))
        return
    from .db import VIEWS_SINCE
    from .timespec import zone_named

    result = run_saved(open_db_readonly(db, VIEWS_SINCE), name, parse_params(params), queries_dir, now=_now(),
                       zone=zone_named(tz), timeout=timeout).as_dict()
    _emit(result, as_json, as_csv, render.sql_csv, render.sql_text)


@main.command()
@db_option
@click.option("--to", "target", required=True, metavar="URL|PATH",
              help="The new, empty ledger database (created and migrated if needed).")
@click.option("--wait", "wait_seconds", type=float, callback=_a_number_of_seconds,
              default=60.0, show_default=True, metavar="S",
              help="Seconds to wait for a sync holding the target before giving up (exit 75).")
@ledger_errors
def export(db, target, wait_seconds) -> None:
    """Copy the whole ledger into another database: SQLite into a shared PostgreSQL, say.

    Unlike syncing the same homes into the new database, a copy keeps the history of
    runs whose directories are gone. The target must be empty. The copy holds the
    target's sync lock: a sync into it waits until the copy is committed. It is one
    transaction: a copy that fails (the target's disk full) leaves the target empty.

    \b
    Example:
      omg-ledger export --db ~/.local/share/omg-ledger/ledger.sqlite \\
                        --to postgresql+psycopg://ledger@db.internal/ledger
    """
    from .export import export_ledger

    copied = export_ledger(open_db_readonly(db), open_db(target, "--to"), wait_seconds=wait_seconds)
    tables = ", ".join(f"{n} {t}" for t, n in copied.items() if n)
    _say(f"copied {sum(copied.values())} rows: {tables or 'the ledger is empty'}")


@main.command(name="datasette-metadata")
@db_option
@click.option("--name", "database_name", metavar="NAME",
              help="Database name Datasette shows (default: the --db file's name without its extension).")
def datasette_metadata(db, database_name) -> None:
    """Print Datasette metadata for the ledger: a title, descriptions of every table,
    view and column, and label columns so foreign keys show names, not ids.

    Reads nothing: the descriptions come from omg-ledger's own schema.

    \b
    Example:
      datasette ledger.sqlite -m <(omg-ledger datasette-metadata --db ledger.sqlite)
    """
    from .datasette import database_name as name_of
    from .datasette import datasette_metadata as build

    _emit_json(build(database_name or name_of(config.resolve_db(db))))


@main.command()
@db_option
@json_option
@click.option("--home", "home_labels", multiple=True, metavar="LABEL", shell_complete=COMPLETE_HOME_LABELS,
              help="Only plans of this home: its label or its directory (this machine's home there) "
                   "(repeatable).")
@ledger_errors
def plans(db, as_json, home_labels) -> None:
    """List plan previews (<home>/plans/<id>/), newest first: graph name and whether the
    planner refused. A preview was paid for but is never a run, and records no spend.

    \b
    Example:
      omg-ledger plans --json
    """
    from .db import RUN_TABLES_SINCE
    from .reports.plans import list_plans

    engine = open_db_readonly(db, RUN_TABLES_SINCE)
    rows = list_plans(engine, home_labels=_home_labels(engine, home_labels))
    if as_json:
        _emit_json(rows)
    else:
        _say(render.plans_table(rows))


if _SIGINT_BEFORE is not None:
    # The command line is defined: from here on Ctrl-C is a KeyboardInterrupt, so open
    # transactions roll back and locks are released, and _LedgerGroup.invoke says so.
    signal.signal(signal.SIGINT, _SIGINT_BEFORE)

if __name__ == "__main__":  # pragma: no cover
    main(prog_name="omg-ledger")  # (python -m omg_ledger.cli: messages name the command as installed)
