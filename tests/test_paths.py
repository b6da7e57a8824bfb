"""Default paths follow the platform: XDG on Linux, ~/Library/Application Support on
macOS, %LOCALAPPDATA%/%APPDATA% on Windows. Expected paths are written out by hand from
the XDG Base Directory specification and Apple's file-system guide."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from omg_ledger import paths
from omg_ledger.db import default_database_path
from omg_ledger.limits import config_path
from omg_ledger.prices import SHIPPED, book_path
from omg_ledger.reports.sql import user_queries_dir

CLI = [sys.executable, "-m", "omg_ledger.cli"]


def test_linux_uses_the_xdg_variables_when_set():
    env = {"HOME": "/home/me", "XDG_DATA_HOME": "/data/me", "XDG_CONFIG_HOME": "/conf/me"}
    assert paths.data_dir("linux", env) == "/data/me/omg-ledger"
    assert paths.config_dir("linux", env) == "/conf/me/omg-ledger"
    assert paths.default_ledger_path("linux", env) == "/data/me/omg-ledger/ledger.sqlite"


@pytest.mark.parametrize("value", [None, "", "relative/dir"], ids=["unset", "empty", "relative"])
def test_linux_falls_back_to_the_xdg_defaults(value):
    """Unset, empty or relative: the specification's defaults under $HOME."""
    env = {"HOME": "/home/me"}
    if value is not None:
        env |= {"XDG_DATA_HOME": value, "XDG_CONFIG_HOME": value}
    assert paths.data_dir("linux", env) == "/home/me/.local/share/omg-ledger"
    assert paths.config_dir("linux", env) == "/home/me/.config/omg-ledger"
    assert paths.default_ledger_path("linux", env) == "/home/me/.local/share/omg-ledger/ledger.sqlite"


def test_macos_uses_application_support_and_ignores_xdg():
    env = {"HOME": "/Users/me", "XDG_DATA_HOME": "/data/me", "XDG_CONFIG_HOME": "/conf/me"}
    assert paths.data_dir("darwin", env) == "/Users/me/Library/Application Support/omg-ledger"
    assert paths.config_dir("darwin", env) == "/Users/me/Library/Application Support/omg-ledger"
    assert paths.default_ledger_path("darwin", env) == \
        "/Users/me/Library/Application Support/omg-ledger/ledger.sqlite"


def test_windows_uses_local_and_roaming_app_data():
    env = {"HOME": "/h", "LOCALAPPDATA": "/Users/me/AppData/Local", "APPDATA": "/Users/me/AppData/Roaming"}
    assert paths.data_dir("win32", env) == os.path.join("/Users/me/AppData/Local", "omg-ledger")
    assert paths.config_dir("win32", env) == os.path.join("/Users/me/AppData/Roaming", "omg-ledger")


def test_every_default_is_under_the_platform_directories(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "conf"))
    assert default_database_path() == str(tmp_path / "data" / "omg-ledger" / "ledger.sqlite")
    assert config_path() == tmp_path / "conf" / "omg-ledger" / "config.toml"
    assert user_queries_dir() == str(tmp_path / "conf" / "omg-ledger" / "queries")
    assert book_path() == SHIPPED  # no prices.toml of the user's yet
    (tmp_path / "conf" / "omg-ledger").mkdir(parents=True)
    (tmp_path / "conf" / "omg-ledger" / "prices.toml").write_text("")
    assert book_path() == tmp_path / "conf" / "omg-ledger" / "prices.toml"


def test_only_paths_py_reads_the_xdg_variables():
    """One function computes the defaults: no other module reads XDG_* or builds ~/.config."""
    package = Path(paths.__file__).parent
    offenders = [str(p.relative_to(package)) for p in package.rglob("*.py") if p.name != "paths.py"
                 and any(s in p.read_text(encoding="utf-8") for s in ('"XDG_', '".config"', '".local"'))]
    assert offenders == []


def _env(tmp_path: Path, **xdg: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "OMG_LEDGER_"))}
    return env | {"HOME": str(tmp_path / "home"), **xdg}


def test_the_command_line_creates_its_ledger_in_xdg_data_home(tmp_path):
    result = subprocess.run([*CLI, "db", "upgrade"], capture_output=True, text=True, timeout=120,
                            env=_env(tmp_path, XDG_DATA_HOME=str(tmp_path / "xdg-data")))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "xdg-data" / "omg-ledger" / "ledger.sqlite").is_file()
    assert not (tmp_path / "home" / ".local").exists()


def test_without_xdg_the_command_line_uses_the_xdg_defaults_under_home(tmp_path):
    result = subprocess.run([*CLI, "db", "upgrade"], capture_output=True, text=True, timeout=120,
                            env=_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "home" / ".local" / "share" / "omg-ledger" / "ledger.sqlite").is_file()


def test_the_command_line_reads_queries_and_limits_from_xdg_config_home(tmp_path):
    config = tmp_path / "xdg-config" / "omg-ledger"
    (config / "queries").mkdir(parents=True)
    (config / "queries" / "mine.sql").write_text("-- mine: my own query\nSELECT 1 AS one\n")
    (config / "config.toml").write_text("[limits]\nday = 50\n")
    env = _env(tmp_path, XDG_CONFIG_HOME=str(tmp_path / "xdg-config"), XDG_DATA_HOME=str(tmp_path / "data"))
    listing = subprocess.run([*CLI, "query", "--list"], capture_output=True, text=True, timeout=120, env=env)
    assert listing.returncode == 0, listing.stderr
    assert any(line.split()[:1] == ["mine"] for line in listing.stdout.splitlines()), listing.stdout
    assert subprocess.run([*CLI, "db", "upgrade"], capture_output=True, timeout=120, env=env).returncode == 0
    limits = subprocess.run([*CLI, "limits", "--json"], capture_output=True, text=True, timeout=120, env=env)
    assert limits.returncode == 0, limits.stderr  # exit 2 would mean no limit was found
    assert '"day"' in limits.stdout
