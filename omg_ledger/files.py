"""Writing an output file so a reader never sees half of it."""

from __future__ import annotations

import contextlib
import os
import tempfile

from .errors import BadArgument


def write_atomic(path: str, text: str) -> None:
    """Write `text` to a temporary file in `path`'s directory, fsync it, then rename it
    over `path`: a reader (node_exporter, a mail job) sees the old file or the new one.
    The temporary name starts with '.' and does not end in the target's suffix, so a
    textfile collector globbing *.prom never reads it."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    except OSError as exc:
        raise BadArgument(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise BadArgument(f"cannot write {path}: {exc.strerror or exc}") from None
