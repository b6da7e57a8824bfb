"""Where the ledger and the homes are: flags > environment > defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .bounds import MAX_ID_CHARS, bounded_path
from .errors import BadArgument, UnsupportedDatabase, require_utf8

ENV_DB = "OMG_LEDGER_DB"
ENV_HOME = "OMG_HOME"
ENV_INVOCATIONS = "OMG_LEDGER_INVOCATIONS"


@dataclass(frozen=True)
class Home:
    """A home to sync: ``label`` given by the user (``explicit``) or the default
    ``<hostname>:<path>``, which only names a new home — an indexed one is found by its
    directory's identity whatever the hostname is now."""

    label: str
    path: str
    explicit: bool = True

    @classmethod
    def from_path(cls, path: str, label: str | None = None) -> Home:
        """The default label is ``<hostname>:<absolute path>`` (``OMG_LEDGER_MACHINE``, when
        set, in place of the hostname); a path too long to index is shortened in it to a
        hash and its tail (the same every time)."""
        import socket

        absolute = os.path.abspath(os.path.expanduser(path))
        # The ledger keeps a home's path, and the one its symlinks lead to, as text.
        for where in (absolute, os.path.realpath(absolute)):
            require_utf8(where, f"home directory {where}")
        if label is not None:
            require_utf8(label, f"home label {label!r}")
        if label is not None and len(label) > MAX_ID_CHARS:
            raise BadArgument(f"a home label is at most {MAX_ID_CHARS} characters; this one has {len(label)}")
        from .tail import machine_named

        machine = machine_named() or socket.gethostname()
        return cls(label or f"{machine}:{bounded_path(absolute)}", absolute, label is not None)


def check_label(label: str) -> None:
    """A label `--home LABEL=DIR` can name: not empty, no '=' (the first one ends the
    label), within the ledger's bound, valid text."""
    require_utf8(label, f"home label {label!r}")
    if not label:
        raise BadArgument("a home label cannot be empty")
    if "=" in label:
        raise BadArgument(f"a home label cannot hold '=' (--home LABEL=DIR ends the label at the first one): "
                          f"{label!r}")
    if len(label) > MAX_ID_CHARS:
        raise BadArgument(f"a home label is at most {MAX_ID_CHARS} characters; this one has {len(label)}")


def resolve_db(flag: str | None, option: str = "--db") -> str:
    """The ledger ``flag`` names, else OMG_LEDGER_DB's, else the default; ``option`` is the
    flag's name, for messages (export's --to is required: click refuses it empty)."""
    from .db import default_database_path

    if flag == "":
        # An unset variable in a cron line (--db "$LEDGER") must not fall back to the default ledger.
        raise BadArgument("--db '' names no ledger: give a SQLite path or a URL (leave --db out for the default)")
    db = flag or os.environ.get(ENV_DB) or default_database_path()
    require_utf8(db, f"{option} {db}", UnsupportedDatabase)  # SQLite and PostgreSQL take text only
    return db


def resolve_homes(flags: tuple[str, ...] | list[str], label: str | None = None) -> list[Home]:
    """`--home DIR` or `--home LABEL=DIR` (repeatable), else $OMG_HOME, else ~/.oh-my-graph."""
    specs = list(flags) or [os.environ.get(ENV_HOME) or os.path.join(os.path.expanduser("~"), ".oh-my-graph")]
    homes = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if sep and name and not os.path.exists(spec):
            directory, given_label = path, name
        else:
            directory, given_label = spec, label if len(specs) == 1 else None
        if not directory:
            # An empty path would be the current directory: an unset variable in a cron
            # line (--home "$DIR") must not index wherever the job happens to run.
            raise BadArgument(f"--home {spec!r} names no directory")
        homes.append(Home.from_path(directory, given_label))
    return homes
