"""Writing an output file so a reader never sees half of it; reading a small input file
without blocking on a FIFO or reading a device without end."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

from .errors import BadArgument


def write_atomic(path: str, text: str) -> None:
    """Write `text` to a temporary file in `path`'s directory, fsync it, then rename it
    over `path`: a reader (node_exporter, a mail job) sees the old file or the new one.
    The temporary name starts with '.' and does not end in the target's suffix, so a
    textfile collector globbing *.prom never reads it.

    A symlink stays a symlink: the file it names is the one replaced. A target that is
    no file (a device such as /dev/stdout or /dev/null, a FIFO) is written into, since a
    rename would put a file in the node's place (as root, /dev/null's)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise BadArgument(f"cannot write {path}: {exc.strerror or exc}") from None
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        _write_into(path, text)
        return
    real_path = os.path.realpath(path)
    directory = os.path.dirname(real_path)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(real_path)}.", suffix=".tmp")
    except OSError as exc:
        raise BadArgument(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, real_path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise BadArgument(f"cannot write {path}: {exc.strerror or exc}") from None


def _write_into(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise BadArgument(f"cannot write {path}: {exc.strerror or exc}") from None


MAX_TEXT_FILE_BYTES = 8 << 20  # a price book, config or saved query is a few KiB


def read_text_file(path: str | os.PathLike, what: str, *, stream: bool = False) -> str:
    """The UTF-8 text of the regular file at ``path`` (a symlink is followed), at most
    MAX_TEXT_FILE_BYTES. Anything else is a BadArgument naming ``what`` it was to be
    (e.g. "the saved query"): a FIFO would block the open until a writer came. With
    ``stream`` (a file named on purpose), a pipe or a character device is read too, to
    the same bound: a shell's ``<(cat book.toml)`` is a pipe (/dev/fd/N), /dev/null an
    empty file, /dev/zero too long. OSError and UnicodeDecodeError are the caller's to word."""
    mode = os.stat(path).st_mode
    _check_readable(mode, path, what, stream)
    # O_NONBLOCK: a FIFO swapped in after the stat is opened at once, then refused.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (0 if stream else os.O_NONBLOCK))
    with open(fd, "rb") as f:
        _check_readable(os.fstat(fd).st_mode, path, what, stream)
        data = f.read(MAX_TEXT_FILE_BYTES + 1)
    if len(data) > MAX_TEXT_FILE_BYTES:
        raise BadArgument(f"{what} {os.fspath(path)} holds more than {MAX_TEXT_FILE_BYTES >> 20} MiB: not read")
    return data.decode("utf-8")


def _check_readable(mode: int, path: str | os.PathLike, what: str, stream: bool) -> None:
    if stat.S_ISREG(mode) or (stream and (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode))):
        return
    expected = "a regular file, a pipe or a character device" if stream else "a regular file"
    raise BadArgument(f"{what} {os.fspath(path)} is {file_kind(mode)}, not {expected}: not read")


def file_kind(mode: int) -> str:
    """What a node that is not a regular file is, for a message: "a FIFO", "a device"…"""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file"
