"""The throwaway PostgreSQL server of tests/pgserver.py works as promised.

The fixtures (pg_server, pg_url) come from tests/pgserver.py, loaded by
tests/conftest.py; do not import them here, or this module would get its own
session server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from tests.pgserver import PostgresServer

pytestmark = pytest.mark.postgres


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url, poolclass=NullPool)


def test_select_one_and_create_table(pg_url: str) -> None:
    engine = _engine(pg_url)
    with engine.begin() as conn:
        assert conn.execute(sa.text("select 1")).scalar_one() == 1
        conn.execute(sa.text("create table t (id int primary key, name text not null)"))
        conn.execute(sa.text("insert into t values (1, 'a'), (2, 'b')"))
    with engine.connect() as conn:
        assert conn.execute(sa.text("select count(*) from t")).scalar_one() == 2
        assert conn.execute(sa.text("show server_encoding")).scalar_one() == "UTF8"
    engine.dispose()


@pytest.fixture
def other_pg_url(pg_server: PostgresServer) -> Iterator[str]:
    name = f"other_{os.getpid()}"
    url = pg_server.create_database(name)
    yield url
    pg_server.drop_database(name)


def test_databases_are_isolated(pg_url: str, other_pg_url: str) -> None:
    assert pg_url != other_pg_url
    a, b = _engine(pg_url), _engine(other_pg_url)
    with a.begin() as conn:
        conn.execute(sa.text("create table only_in_a (x int)"))
    with b.connect() as conn:
        exists = conn.execute(sa.text("select to_regclass('only_in_a') is not null")).scalar_one()
        assert exists is False
        assert conn.execute(sa.text("select current_database()")).scalar_one().startswith("other_")
    a.dispose()
    b.dispose()


def test_each_test_gets_a_fresh_database(pg_url: str) -> None:
    # Runs after test_select_one_and_create_table: its table must be gone.
    with _engine(pg_url).connect() as conn:
        assert conn.execute(sa.text("select to_regclass('t') is null")).scalar_one() is True


def test_unix_socket_only_no_tcp(pg_server: PostgresServer, pg_url: str) -> None:
    with _engine(pg_url).connect() as conn:
        assert conn.execute(sa.text("show listen_addresses")).scalar_one() == ""
        # Connected over the Unix socket: no client address.
        assert conn.execute(sa.text("select inet_client_addr()")).scalar_one() is None
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            assert conn.execute(sa.text(f"show {setting}")).scalar_one() == "off"
    assert pg_server.socket_dir is not None
    assert (pg_server.socket_dir / f".s.PGSQL.{pg_server.port}").is_socket()


def test_drop_database_terminates_open_connections(pg_server: PostgresServer) -> None:
    url = pg_server.create_database(f"busy_{os.getpid()}")
    engine = sa.create_engine(url)  # pooled: keeps its connection open
    with engine.connect() as conn:
        conn.execute(sa.text("select 1"))
    pg_server.drop_database(f"busy_{os.getpid()}")
    rows = pg_server.execute_admin(
        "select 1 from pg_database where datname = :n", n=f"busy_{os.getpid()}"
    )
    assert rows == []
    engine.dispose()


def test_second_server_gets_its_own_port_and_stops_cleanly(pg_server: PostgresServer) -> None:
    with PostgresServer(pg_server.bindir) as other:
        assert other.port != pg_server.port
        assert other.socket_dir != pg_server.socket_dir
        base = other.base_dir
        with _engine(other.url()).connect() as conn:
            assert conn.execute(sa.text("select current_database()")).scalar_one() == other.dbname
    assert not other.running
    assert base is not None and not base.exists()
