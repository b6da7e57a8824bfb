"""A throwaway PostgreSQL server for the test suite.

The tests never assume a server is already running: this module runs
``initdb`` and ``pg_ctl`` itself, in a temporary directory, and listens on
a Unix socket only (``listen_addresses=''``, so no TCP port is opened).

When the tests run as root (as CI does), ``initdb`` refuses to work, so the
server's files belong to the ``postgres`` OS user and its processes run as
that user; otherwise they run as the current user. Either way the database
superuser is called ``postgres``, and ``trust`` authentication is used.

Fixtures, for ``tests/conftest.py`` to load (``pytest_plugins`` or import):

* ``pg_server`` (session): one :class:`PostgresServer` for the whole session,
  or a skip when the PostgreSQL binaries are not installed.
* ``pg_url`` (function): the SQLAlchemy URL of a fresh, uniquely named,
  empty database, dropped again after the test.

The server is stopped by the fixture's teardown; an ``atexit`` hook and a
SIGTERM/SIGHUP handler stop it too if the session is cut short.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

__all__ = [
    "PostgresServer",
    "PostgresServerError",
    "find_pg_bindir",
    "pg_server",
    "pg_url",
]

SKIP_MESSAGE = (
    "PostgreSQL binaries not found (initdb/pg_ctl); install the Debian package "
    "postgresql — .ci/run does this"
)

_PG_LIB = Path("/usr/lib/postgresql")
_SUPERUSER = "postgres"
_OS_USER = "postgres"  # runs the server when we are root
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# A Unix socket path (sun_path) holds at most 107 bytes; ".s.PGSQL.NNNNN" needs 15.
_MAX_SOCKET_DIR = 90


class PostgresServerError(RuntimeError):
    """The server could not be set up, started or stopped."""


def _is_pg_bindir(d: Path) -> bool:
    return all(os.access(d / name, os.X_OK) for name in ("initdb", "pg_ctl"))


def find_pg_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None.

    Looks in PATH first, then in the newest ``/usr/lib/postgresql/*/bin``
    (Debian does not put ``initdb`` on PATH).
    """
    initdb = shutil.which("initdb")
    if initdb:
        d = Path(initdb).parent
        if _is_pg_bindir(d):
            return d
        pg_ctl = shutil.which("pg_ctl")
        if pg_ctl:
            # Distinct PATH entries; trust the real location of initdb instead.
            real = Path(initdb).resolve().parent
            if _is_pg_bindir(real):
                return real

    def version(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.parent.name)) or (0,)

    try:
        candidates = [p for p in _PG_LIB.glob("*/bin") if _is_pg_bindir(p)]
    except OSError:
        return None
    if not candidates:
        return None
    return max(candidates, key=version)


# --------------------------------------------------------------------------
# Clean-up of servers left running when the process is cut short.

_live_servers: set[PostgresServer] = set()
_live_lock = threading.RLock()  # re-entrant: the signal handler takes it too
_hooks_installed = False


def _stop_all_live() -> None:
    with _live_lock:
        servers = list(_live_servers)
    for server in servers:
        with contextlib.suppress(Exception):  # best effort at exit
            server.stop()


def _on_fatal_signal(signum: int, frame: Any) -> None:
    _stop_all_live()
    # Then die of the same signal, as if we had never caught it.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_exit_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(_stop_all_live)
    # SIGINT already becomes KeyboardInterrupt, which pytest turns into an
    # orderly teardown. SIGTERM/SIGHUP (CI cancellation, closed terminal)
    # would kill us without running atexit, so stop the servers first -- but
    # only where nobody else has claimed the signal.
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, _on_fatal_signal)


# --------------------------------------------------------------------------

_port_counter = itertools.count()


def _pick_port() -> int:
    """A port number no other server of ours is using.

    The server opens no TCP socket; the port only names its Unix socket file
    (``.s.PGSQL.<port>``) inside a socket directory that is already private
    to this server. Taking a currently free ephemeral TCP port still makes
    numbers distinct between servers started at the same time.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    except OSError:
        return 20000 + (os.getpid() * 31 + next(_port_counter)) % 40000


def _quote_ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"not a plain SQL identifier: {name!r}")
    return '"' + name + '"'


class PostgresServer:
    """A private PostgreSQL cluster on a Unix socket in a temporary directory.

    >>> with PostgresServer() as pg:
    ...     engine = sqlalchemy.create_engine(pg.url())
    """

    def __init__(
        self,
        bindir: Path | str | None = None,
        *,
        dbname: str = "omg_ledger_test",
        port: int | None = None,
        start_timeout: float = 60.0,
        extra_options: dict[str, str] | None = None,
    ) -> None:
        found = Path(bindir) if bindir is not None else find_pg_bindir()
        if found is None or not _is_pg_bindir(found):
            raise PostgresServerError(SKIP_MESSAGE)
        _quote_ident(dbname)
        self.bindir: Path = found
        self.dbname = dbname
        self.port = port if port is not None else _pick_port()
        self.start_timeout = start_timeout
        self.extra_options = dict(extra_options or {})
        self.base_dir: Path | None = None
        self.data_dir: Path | None = None
        self.socket_dir: Path | None = None
        self.log_file: Path | None = None
        self.startup_seconds: float | None = None
        self._owner_pid = os.getpid()
        self._running = False
        self._admin_engine: Any = None
        self._uid: int | None = None
        self._gid: int | None = None

    # ---------------------------------------------------------------- setup

    def _resolve_user(self) -> None:
        if os.geteuid() != 0:
            return
        import pwd

        try:
            pw = pwd.getpwnam(_OS_USER)
        except KeyError as e:
            raise PostgresServerError(
                f"running as root, and initdb refuses to run as root, but there is no "
                f"{_OS_USER!r} OS user to run the server as"
            ) from e
        self._uid, self._gid = pw.pw_uid, pw.pw_gid

    def _make_dirs(self) -> None:
        tmp = tempfile.gettempdir()
        if len(tmp) > _MAX_SOCKET_DIR - 30 and os.path.isdir("/tmp"):
            tmp = "/tmp"  # keep the socket path short enough for sun_path
        self.base_dir = Path(tempfile.mkdtemp(prefix="omg-pg-", dir=tmp))
        self.data_dir = self.base_dir / "data"
        self.socket_dir = self.base_dir / "sock"
        self.log_file = self.base_dir / "server.log"
        self.socket_dir.mkdir(mode=0o700)
        self.log_file.touch(mode=0o600)
        if self._uid is not None:
            for p in (self.base_dir, self.socket_dir, self.log_file):
                os.chown(p, self._uid, self._gid)

    def _run(self, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env.update(LC_ALL="C", LANG="C", TZ=env.get("TZ", "UTC"))
        for var in ("PGDATA", "PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGOPTIONS"):
            env.pop(var, None)
        kwargs: dict[str, Any] = {}
        if self._uid is not None:
            kwargs.update(user=self._uid, group=self._gid, extra_groups=[])
            env["HOME"] = str(self.base_dir)
            env["USER"] = env["LOGNAME"] = _OS_USER
        return subprocess.run(
            args,
            cwd=self.base_dir,  # the server user must be able to enter the cwd
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **kwargs,
        )

    def _server_options(self) -> list[str]:
        settings = {
            "listen_addresses": "",  # Unix socket only, no TCP
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "max_connections": "100",
        }
        settings.update(self.extra_options)
        opts: list[str] = []
        for key, value in settings.items():
            opts += ["-c", f"{key}={value}"]
        # -k: the socket directory; -p: the port, which only names the socket file.
        return ["-k", str(self.socket_dir), "-p", str(self.port), *opts]

    def _read_log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace") if self.log_file else ""
        except OSError as e:
            return f"(could not read server log: {e})"

    def _fail(self, what: str, proc: subprocess.CompletedProcess[str] | None) -> NoReturn:
        parts = [f"PostgreSQL {what} (bindir {self.bindir}, port {self.port})"]
        if proc is not None:
            parts.append(f"command: {shlex.join(str(a) for a in proc.args)}")
            parts.append(f"exit status: {proc.returncode}")
            if proc.stdout.strip():
                parts.append("stdout:\n" + proc.stdout.rstrip())
            if proc.stderr.strip():
                parts.append("stderr:\n" + proc.stderr.rstrip())
        log = self._read_log()
        parts.append("server log:\n" + (log.rstrip() or "(empty)"))
        message = "\n".join(parts)
        self._cleanup(force_kill=True)
        raise PostgresServerError(message)

    # -------------------------------------------------------------- lifecycle

    def start(self) -> PostgresServer:
        if self._running:
            return self
        t0 = time.monotonic()
        self._owner_pid = os.getpid()
        self._resolve_user()
        self._make_dirs()
        _install_exit_hooks()
        with _live_lock:
            _live_servers.add(self)
        try:
            proc = self._run(
                [
                    str(self.bindir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    _SUPERUSER,
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
                timeout=self.start_timeout,
            )
        except subprocess.TimeoutExpired:
            self._fail("initdb timed out", None)
        if proc.returncode != 0:
            self._fail("initdb failed", proc)

        try:
            proc = self._run(
                [
                    str(self.bindir / "pg_ctl"),
                    "start",
                    "-w",
                    "-t",
                    str(int(self.start_timeout)),
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_file),
                    "-o",
                    shlex.join(self._server_options()),
                ],
                timeout=self.start_timeout + 10,
            )
        except subprocess.TimeoutExpired:
            self._fail("server start timed out", None)
        if proc.returncode != 0:
            self._fail("server failed to start", proc)
        self._running = True

        try:
            self.create_database(self.dbname)
        except Exception as e:  # re-raised with the server log
            self._fail(f"server started, but creating database {self.dbname!r} failed: {e}", None)
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Stop the server (``-m immediate``) and delete its files. Idempotent."""
        if os.getpid() != self._owner_pid:
            return  # a forked child must not tear down its parent's server
        self._cleanup(force_kill=False)

    def _cleanup(self, force_kill: bool) -> None:
        if self._admin_engine is not None:
            with contextlib.suppress(Exception):
                self._admin_engine.dispose()
            self._admin_engine = None
        if self.data_dir is not None and (self.data_dir / "postmaster.pid").exists():
            stopped = False
            try:
                proc = self._run(
                    [
                        str(self.bindir / "pg_ctl"),
                        "stop",
                        "-m",
                        "immediate",
                        "-w",
                        "-t",
                        "30",
                        "-D",
                        str(self.data_dir),
                    ],
                    timeout=40,
                )
                stopped = proc.returncode == 0
            except (OSError, subprocess.SubprocessError):
                pass
            if not stopped or force_kill:
                self._kill_postmaster()
        self._running = False
        with _live_lock:
            _live_servers.discard(self)
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def _kill_postmaster(self) -> None:
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError, TypeError):
            return
        try:
            os.kill(pid, signal.SIGQUIT)  # postgres' own "immediate shutdown"
            for _ in range(100):
                os.kill(pid, 0)
                time.sleep(0.05)
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._running

    # ----------------------------------------------------------- connecting

    def url(self, dbname: str | None = None) -> str:
        """SQLAlchemy URL (psycopg 3 driver) of ``dbname`` on this server."""
        name = dbname or self.dbname
        return f"postgresql+psycopg://{_SUPERUSER}@/{name}?host={self.socket_dir}&port={self.port}"

    def conninfo(self, dbname: str | None = None) -> str:
        """libpq connection string, e.g. for ``psycopg.connect`` or ``psql``."""
        name = dbname or self.dbname
        return f"host={self.socket_dir} port={self.port} user={_SUPERUSER} dbname={name}"

    def _admin(self) -> Any:
        if not self._running:
            raise PostgresServerError("server is not running")
        if self._admin_engine is None:
            import sqlalchemy as sa
            from sqlalchemy.pool import NullPool

            self._admin_engine = sa.create_engine(
                self.url("postgres"), isolation_level="AUTOCOMMIT", poolclass=NullPool
            )
        return self._admin_engine

    def execute_admin(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        """Run one statement in the ``postgres`` database, autocommit."""
        import sqlalchemy as sa

        with self._admin().connect() as conn:
            result = conn.execute(sa.text(sql), params)
            return [tuple(r) for r in result] if result.returns_rows else []

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create database ``name`` (optionally copying ``template``); return its URL.

        A migrated database used as ``template`` makes per-test copies cheap.
        """
        sql = f"CREATE DATABASE {_quote_ident(name)}"
        if template is not None:
            sql += f" TEMPLATE {_quote_ident(template)}"
        self.execute_admin(sql)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop ``name`` if it exists, disconnecting its sessions first."""
        quoted = _quote_ident(name)
        self.execute_admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = :name AND pid <> pg_backend_pid()",
            name=name,
        )
        self.execute_admin(f"DROP DATABASE IF EXISTS {quoted} WITH (FORCE)")


# ------------------------------------------------------------------ fixtures

_db_counter = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """One private PostgreSQL server for the whole test session."""
    bindir = find_pg_bindir()
    if bindir is None:
        pytest.skip(SKIP_MESSAGE)
    server = PostgresServer(bindir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: PostgresServer) -> Iterator[str]:
    """URL of a fresh, empty database for this test; dropped afterwards."""
    name = f"t{os.getpid()}_{next(_db_counter)}_{uuid.uuid4().hex[:8]}"
    url = pg_server.create_database(name)
    try:
        yield url
    finally:
        if pg_server.running:
            pg_server.drop_database(name)
