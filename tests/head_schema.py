"""`make head-schema`: write migrations/head-schema.{sqlite,postgresql}.sql again from what
the migrations build (SQLite in a temporary file; PostgreSQL in a private server of its
own, read back with that server's pg_dump). Not a test: tests/test_migrations.py checks
that the packaged files equal what this writes."""

from __future__ import annotations

from omg_ledger.db import write_head_schema_file
from tests.pgserver import PostgresServer, PostgresServerError


def pg_dump_of(server: PostgresServer) -> str:
    """The server's own pg_dump (Debian puts only some of its programs on PATH)."""
    return str((server.bindir / "initdb").resolve().parent / "pg_dump")


def main() -> None:
    print(write_head_schema_file())
    try:
        with PostgresServer() as server:
            print(write_head_schema_file(server.create_database("head_schema"), pg_dump_of(server)))
    except PostgresServerError as exc:
        raise SystemExit(f"PostgreSQL's head schema is not written: {exc}") from None


if __name__ == "__main__":  # python -m tests.head_schema, from the checkout
    main()
