"""`omg-ledger sync` on a terminal: a progress line redrawn in place that fits the
width, and a summary a person reads (issue 15). The sync runs as a real process with
stdout and stderr on a real pseudo-terminal; what it wrote is replayed through a small
terminal model (carriage return, erase to end of line, newline, autowrap at the
width) to see what a person would see."""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omg_ledger.render import format_duration, format_size, progress_line

from .conftest import CORPUS_HOME

CLI = [sys.executable, "-m", "omg_ledger.cli"]
CLEAR_LINE = "\r\x1b[K"


def run_on_a_terminal(args: list[str], columns: int, timeout: float = 120, term: str = "xterm") -> tuple[int, str]:
    """Run the CLI with stdout and stderr on a new pseudo-terminal of ``columns``
    columns (and COLUMNS set to it); returns its exit code and every byte it wrote."""
    master, slave = os.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "TERM": term}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([*CLI, *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                proc.kill()
                pytest.fail(f"no output and no exit within {timeout}s")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    return proc.wait(timeout=timeout), b"".join(chunks).decode("utf-8")


def screen(output: str, columns: int) -> tuple[list[str], int]:
    """The lines a terminal of ``columns`` columns shows after ``output`` and how many
    times a line was rewritten in place. A character written past the last column
    would wrap onto a new line: the test fails there (that is how bars "stack")."""
    lines = [[]]
    col = 0
    redraws = 0
    i = 0
    while i < len(output):
        if output.startswith("\x1b[K", i):
            del lines[-1][col:]
            i += 3
            continue
        ch = output[i]
        i += 1
        if ch == "\r":
            if col > 0 and not output.startswith("\n", i):
                redraws += 1
            col = 0
        elif ch == "\n":
            lines.append([])
            col = 0
        elif ch == "\x1b":
            pytest.fail(f"an escape sequence other than erase-line: {output[i - 1:i + 8]!r}")
        else:
            if col >= columns:
                pytest.fail(f"wider than {columns} columns, the terminal wraps: {''.join(lines[-1])!r} + {ch!r}")
            line = lines[-1]
            line[col:col + 1] = [ch]
            col += 1
    return ["".join(line) for line in lines if line], redraws


@pytest.fixture
def home(tmp_path) -> Path:
    home = tmp_path / "home"
    shutil.copytree(CORPUS_HOME / "runs", home / "runs")
    return home


@pytest.mark.parametrize("columns", [12, 40, 80, 200])
def test_sync_progress_redraws_in_place_within_the_width_and_the_summary_reads_in_mb(home, tmp_path, columns):
    code, output = run_on_a_terminal(["sync", "--db", str(tmp_path / "ledger.sqlite"), "--home", str(home)],
                                     columns)
    assert code == 0, output
    assert "Traceback" not in output
    lines, redraws = screen(output, columns)
    # The first run and the last are always drawn (in between, at most 10 a second).
    assert redraws >= 1, repr(output)
    assert output.count(CLEAR_LINE) >= 2
    progress = [ln for ln in lines if re.match(r"(sync )?[\d,]+/[\d,]+", ln)]
    assert len(progress) == 1, lines  # one line for the stage, not a stack of them
    final = progress[0]
    if columns >= 40:
        assert re.fullmatch(r"sync 25/25( \[#+\])? [\d,]+\.\d/s \d+:\d\d ETA 0:00", final), final
    if columns >= 80:
        bar = re.search(r"\[(#+)\]", final)
        assert bar and len(final) <= columns - 1, final
    summary = " ".join(lines[lines.index(final) + 1:])
    assert re.search(r"synced 25 run\(s\): 25 changed, [\d,]+ new event\(s\), \d+\.\d (kB|MB) read", summary), summary
    assert "bytes read" not in summary


def test_progress_line_fields_by_hand():
    # 1,234 of 10,000 in 12.5 s: 98.7 a second, 8,766 left at that rate is 88.8 s.
    assert progress_line("sync", 1234, 10000, 12.5, 200) == (
        "sync 1,234/10,000 [" + "#" * 4 + "." * 36 + "] 98.7/s 0:12 ETA 1:28")
    assert progress_line("sync", 1234, 10000, 12.5, 40) == "sync 1,234/10,000 98.7/s 0:12 ETA 1:28"
    assert progress_line("sync", 1234, 10000, 12.5, 30) == "sync 1,234/10,000 98.7/s 0:12"
    assert progress_line("sync", 1234, 10000, 12.5, 13) == "1,234/10,000"
    assert progress_line("sync", 1234, 10000, 12.5, 12) == "1234/10000"  # never a number cut short
    assert progress_line("sync", 0, 150, 0.0, 40) == "sync 0/150 0.0/s 0:00 ETA ?"
    for width in range(1, 120):
        assert len(progress_line("derive", 77, 150, 3601.0, width)) <= max(1, width - 1)


@pytest.mark.parametrize(("count", "shown"), [
    (0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (4096, "4.1 kB"), (23_400_000, "23.4 MB"),
    (999_949, "999.9 kB"), (999_950, "1.0 MB"), (2_500_000_000, "2.5 GB")])
def test_sizes_read_as_a_person_reads_them(count, shown):
    assert format_size(count) == shown


@pytest.mark.parametrize(("seconds", "shown"), [(0, "0:00"), (7.9, "0:07"), (754, "12:34"), (3723, "1:02:03")])
def test_durations(seconds, shown):
    assert format_duration(seconds) == shown


def test_a_symlinked_runs_dir_is_said_on_a_terminal_within_the_width(tmp_path):
    target = tmp_path / "a-much-longer-disk-path" / "omg-runs"
    shutil.copytree(CORPUS_HOME / "runs" / "20261129-181512.929654081-1", target / "20261129-181512.929654081-1")
    home = tmp_path / "home"
    home.mkdir()
    os.symlink(target, home / "runs")
    code, output = run_on_a_terminal(["sync", "--db", str(tmp_path / "ledger.sqlite"), "--home", str(home)], 40)
    assert code == 0, output
    lines, _ = screen(output, 40)
    text = "".join(lines)  # wrapped at 40 columns; the paths may be broken across lines
    assert "is a symlink: read in" in " ".join(lines) and str(target) in text, lines


def test_on_a_dumb_terminal_progress_is_redrawn_without_escape_sequences(home, tmp_path):
    """TERM=dumb (Emacs' shell, some CI consoles) has no erase-line: the line is redrawn
    with a carriage return and blanks over what the longer line before it left."""
    code, output = run_on_a_terminal(["sync", "--db", str(tmp_path / "ledger.sqlite"), "--home", str(home)], 80,
                                     term="dumb")
    assert code == 0 and "\x1b" not in output, repr(output)
    lines, redraws = screen(output, 80)
    assert redraws >= 1
    progress = [ln.rstrip() for ln in lines if re.match(r"sync [\d,]+/[\d,]+", ln)]
    assert len(progress) == 1 and re.fullmatch(r"sync 25/25 \[#+\] [\d,]+\.\d/s \d+:\d\d ETA 0:00", progress[0]), lines
