"""Hermetic tests: the ledger and homes live under tmp_path; nothing touches a real
home. PostgreSQL fixtures come from tests/pgserver.py (a real server started here)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest_plugins = ["tests.pgserver"]

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("OMG_LEDGER_CORPUS", REPO.parent / "shared" / "corpus"))
CORPUS_HOME = CORPUS / "home"


@pytest.fixture(autouse=True)
def hermetic_environment(tmp_path_factory, monkeypatch):
    """No test may read the user's ~/.oh-my-graph or write their ledger."""
    fake_home = tmp_path_factory.mktemp("user-home")
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("XDG_DATA_HOME", str(fake_home / ".local" / "share"))
    monkeypatch.setenv("OMG_HOME", str(fake_home / ".oh-my-graph"))
    monkeypatch.delenv("OMG_LEDGER_DB", raising=False)
    monkeypatch.delenv("OMG_LEDGER_INVOCATIONS", raising=False)
    # Price book, config file and clock: never the user's, never this machine's override.
    for name in ("XDG_CONFIG_HOME", "OMG_LEDGER_PRICES", "OMG_LEDGER_CONFIG", "OMG_LEDGER_NOW"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def corpus_home() -> Path:
    if not CORPUS_HOME.is_dir():
        pytest.fail(f"the shared corpus is missing at {CORPUS_HOME} (set OMG_LEDGER_CORPUS)")
    return CORPUS_HOME


@pytest.fixture
def corpus_copy(tmp_path, corpus_home) -> Path:
    """A writable copy of the corpus home, for tests that change files under the ledger."""
    target = tmp_path / "home"
    shutil.copytree(corpus_home, target, symlinks=True)
    for root, dirs, files in os.walk(target):
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o700 if name in dirs else 0o600)
    return target


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.sqlite'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request, tmp_path) -> str:
    """Every database test runs on SQLite and on a real PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    return request.getfixturevalue("pg_url")
