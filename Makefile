# The two commands of the README. Both set everything up on a fresh machine.
#   make demo  -- index the bundled example runs into a SQLite ledger and report on them
#   make test  -- the whole test suite (pytest), SQLite and a real PostgreSQL server
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_DB := $(CURDIR)/examples/demo-ledger.sqlite

# The editable install links each of the package's files under build/ (setuptools'
# strict mode) instead of installing an import hook, which every command paid for at
# start-up (~30 ms of `omg-ledger --version`'s ~120, measured). A file added to the
# package needs linking: the list of its files is a prerequisite, rewritten (and the
# install redone) only when the list changes or the links are gone.
EDITABLE := --config-settings editable_mode=strict --editable
PACKAGE_FILES := $(VENV)/.package-files

$(PACKAGE_FILES): FORCE
	@mkdir -p $(VENV)
	@find omg_ledger migrations queries -type f \( -name '*.py' -o -name '*.sql' -o -name '*.toml' \
		-o -name '*.mako' -o -name '*.ini' \) | LC_ALL=C sort > $@.new
	@if cmp -s $@.new $@ && ls -d build/__editable__.omg_ledger-* >/dev/null 2>&1; then rm $@.new; \
		else mv $@.new $@; fi

$(BIN)/omg-ledger: pyproject.toml $(PACKAGE_FILES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(EDITABLE) '.[test]'
	touch $@

.PHONY: install demo test lint bench head-schema FORCE
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
	$(BIN)/pip install --quiet $(EDITABLE) '.[test,bench]'
	touch $@

bench: install $(VENV)/.bench-extra
	$(BIN)/python -m benchmarks.run
