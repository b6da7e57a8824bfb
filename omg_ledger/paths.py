"""Where omg-ledger keeps its own files by default, as each platform expects.

* Linux and other Unix: the XDG base directories, ``$XDG_DATA_HOME/omg-ledger`` (default
  ``~/.local/share/omg-ledger``) for the ledger and ``$XDG_CONFIG_HOME/omg-ledger``
  (default ``~/.config/omg-ledger``) for config.toml, prices.toml and queries/. A relative
  XDG variable is ignored, as the XDG specification says.
* macOS: ``~/Library/Application Support/omg-ledger`` for both.
* Windows: ``%LOCALAPPDATA%\\omg-ledger`` for data, ``%APPDATA%\\omg-ledger`` for config.

Every default path is computed here (flags and ``OMG_LEDGER_*`` variables still come
first, where they are read). Only ``os`` and ``sys``: this runs at start-up.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

APP = "omg-ledger"


def _home(env: Mapping[str, str]) -> str:
    home = env.get("HOME")
    return home if home else os.path.expanduser("~")


def _xdg(env: Mapping[str, str], variable: str, fallback: tuple[str, ...]) -> str:
    value = env.get(variable, "")
    return value if os.path.isabs(value) else os.path.join(_home(env), *fallback)


def data_dir(platform: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The directory of the default ledger. `platform` as ``sys.platform`` spells it
    (default: this one); `env` the environment (default: this process's)."""
    platform = platform or sys.platform
    env = os.environ if env is None else env
    if platform == "darwin":
        return os.path.join(_home(env), "Library", "Application Support", APP)
    if platform == "win32":
        return os.path.join(env.get("LOCALAPPDATA") or os.path.join(_home(env), "AppData", "Local"), APP)
    return os.path.join(_xdg(env, "XDG_DATA_HOME", (".local", "share")), APP)


def config_dir(platform: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The directory of config.toml, prices.toml and queries/ (arguments as in :func:`data_dir`)."""
    platform = platform or sys.platform
    env = os.environ if env is None else env
    if platform == "darwin":
        return os.path.join(_home(env), "Library", "Application Support", APP)
    if platform == "win32":
        return os.path.join(env.get("APPDATA") or os.path.join(_home(env), "AppData", "Roaming"), APP)
    return os.path.join(_xdg(env, "XDG_CONFIG_HOME", (".config",)), APP)


def default_ledger_path(platform: str | None = None, env: Mapping[str, str] | None = None) -> str:
    return os.path.join(data_dir(platform, env), "ledger.sqlite")
