# The two commands of the README. Both set everything up on a fresh machine.
#   make demo  -- index the bundled example runs into a SQLite ledger and report on them
#   make test  -- the whole test suite (pytest), SQLite and a real PostgreSQL server
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_DB := $(CURDIR)/examples/demo-ledger.sqlite

$(BIN)/omg-ledger: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

.PHONY: install demo test lint bench head-schema
install: $(BIN)/omg-ledger

demo: install
	$(BIN)/omg-ledger sync --db $(DEMO_DB) --home examples/home
	$(BIN)/omg-ledger runs --db $(DEMO_DB)
	$(BIN)/omg-ledger cost --db $(DEMO_DB) --by run

test: install
	$(BIN)/python -m pytest

# After adding a migration: the schemas a new SQLite or PostgreSQL ledger is created
# with (db.py); PostgreSQL's is read from a private server (initdb, pg_ctl, pg_dump).
head-schema: install
	$(BIN)/python -m tests.head_schema

lint: install
	$(BIN)/ruff check omg_ledger tests benchmarks migrations

# The benchmark also runs its competitor, sqlite-utils (the [bench] extra, not a dependency).
$(VENV)/.bench-extra: pyproject.toml $(BIN)/omg-ledger
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $@

bench: install $(VENV)/.bench-extra
	$(BIN)/python -m benchmarks.run
