"""Output a person reads: tables fit COLUMNS, numbers are right-aligned with thousands
separators, colour only on a terminal (a real pseudo-terminal here) and never with
NO_COLOR or in a pipe."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from omg_ledger import render

from .conftest import REPO

ESC = "\x1b["


def cli(*args, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=120, env=env)


def in_pty(*args, env_extra: dict | None = None) -> str:
    """Run the CLI with its stdout on a real pseudo-terminal; return what it wrote."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    env.update({"TERM": "xterm-256color", **(env_extra or {})})
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], stdout=secondary,
                                   stderr=subprocess.PIPE, env=env)
        os.close(secondary)
        chunks = []
        while True:
            try:
                data = os.read(primary, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        assert process.wait(timeout=120) in (0, 1), process.stderr.read()
    finally:
        os.close(primary)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("terminal") / "ledger.sqlite"
    assert cli("sync", "--db", path, "--home", REPO / "examples" / "home").returncode == 0
    return path


@pytest.mark.parametrize("columns", [60, 80, 120, 200])
def test_runs_fits_the_terminal_width(db, columns):
    out = cli("runs", "--db", db, env_extra={"COLUMNS": str(columns)}).stdout
    lines = out.splitlines()
    assert lines and all(len(line) <= columns for line in lines), max(lines, key=len)
    header = lines[0].split()
    assert header[0] == "RUN" and "COST" in header and "STATUS" in header  # never dropped
    if columns < 150:
        assert "TOKENS(I/C/O/R)" not in header  # the first to go


def test_narrow_terminal_drops_columns_and_wraps_hints(db):
    out = cli("runs", "--db", db, env_extra={"COLUMNS": "40"}).stdout
    header = out.splitlines()[0].split()
    assert header == ["RUN", "COST", "STATUS"]
    lines = out.splitlines()
    notes = lines[next(i for i, line in enumerate(lines) if line.startswith("25 run(s)")):]
    assert len(notes) > 3 and all(len(line) <= 40 for line in notes), max(notes, key=len)
    assert any(line.startswith("  ") for line in notes)  # a wrapped hint continues indented


def test_a_pipe_gets_every_column_in_full(db):
    out = cli("runs", "--db", db).stdout
    assert out.splitlines()[0].split() == ["RUN", "GRAPH", "NODES", "LEGS", "COST", "TOKENS(I/C/O/R)", "STATUS",
                                           "STARTED", "(UTC)", "HOME"]
    assert "…" not in out and ESC not in out


def test_numbers_are_right_aligned_with_thousands_separators(db):
    lines = cli("runs", "--db", db, env_extra={"COLUMNS": "250"}).stdout.splitlines()
    header = lines[0]
    # auto-codex's tokens (README's session): 13100 input, 9500 cached, 1720 output, 564 reasoning.
    codex = next(line for line in lines if " auto-codex " in line)
    assert "13,100/9,500/1,720/564" in codex
    for name in ("COST", "TOKENS(I/C/O/R)", "LEGS"):
        end = header.index(name) + len(name)
        for row in lines[2:27]:
            assert row[end - 1] != " " and (len(row) == end or row[end] == " "), (name, row)
    cost = cli("cost", "--db", db, "--by", "runtime", "--tz", "UTC", env_extra={"COLUMNS": "200"}).stdout
    # codex = auto-codex (13100/9500/1720/564) + s18-codex (14900/10100/2230/920).
    codex_row = next(line for line in cost.splitlines() if line.startswith("codex "))
    assert codex_row.endswith("28,000/19,600/3,950/1,484")


def test_wide_characters_are_measured_as_the_terminal_shows_them():
    assert render.display_width("日本語") == 6 and render.display_width("e\u0301") == 1
    table = render.fitted_table(["NAME", "N"], [["日本", "1"], ["ab", "22"]], right={1})
    first, _, row1, row2 = table.splitlines()
    assert render.display_width(row1) == render.display_width(row2) == render.display_width(first)
    cut = render.ellipsize("日本語テキスト", 7)
    assert cut.endswith("…") and render.display_width(cut) <= 7


def test_colour_only_on_a_terminal_and_never_with_no_color(db):
    shown = in_pty("runs", "--db", db)
    assert f"{ESC}32mPASS{ESC}0m" in shown and f"{ESC}1;31mABANDONED{ESC}0m" in shown
    assert ESC not in in_pty("runs", "--db", db, env_extra={"NO_COLOR": "1"})
    assert ESC not in cli("runs", "--db", db).stdout
    audit = in_pty("audit", "--db", db)
    assert f"{ESC}1;31mNEEDS ATTENTION" in audit
    assert ESC not in in_pty("audit", "--db", db, env_extra={"NO_COLOR": "1"})


def test_text_tables_write_every_time_one_way(tmp_path):
    """README: text tables write times one way, `2026-11-29 18:15:22.073Z` (UTC)."""
    import re

    one_way = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z")
    db, home, stream = tmp_path / "ledger.sqlite", tmp_path / "home", tmp_path / "events.jsonl"
    (home / "runs").mkdir(parents=True)
    stream.write_text('{"ts":"2024-05-01T10:00:00.5Z","role":"dev","milestone":"M1","event":"start"}\n')
    assert cli("sync", "--db", db, "--home", home, "--invocations", stream).returncode == 0
    homes = cli("homes", "--db", db).stdout.splitlines()
    assert homes[0].split()[-2:] == ["LAST", "SYNC"]
    assert one_way.search(homes[2]) and "T" not in homes[2].split()[-2]
    report = cli("invocations", "--db", db, "--since", "2024-05-01", env_extra={"TZ": "UTC"}).stdout
    assert "\nsince 2024-05-01 00:00:00.000Z\n" in report
    working = report.split("WORKING NOW", 1)[1].splitlines()
    assert working[1].split()[2] == "STARTED" and working[3].split()[:4] == ["dev", "M1", "2024-05-01", "10:00:00.500Z"]
