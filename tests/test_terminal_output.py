"""Nothing a run directory says can drive the terminal or a spreadsheet.

A home whose state.json (runtime, graph name, build_evidence answer and declarer),
run-directory names, plan-directory names and stream lines carry escape sequences,
bidi overrides, U+2028/U+2029 and C0/C1 controls is synced, then every command's
output is read as the bytes a terminal would get: no raw control or bidi character
may be in it (our own line breaks excepted), and CSV cells that a spreadsheet would
run as a formula start with an apostrophe. Real processes, real files."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from .conftest import CORPUS_HOME

CLI = [sys.executable, "-m", "omg_ledger.cli"]

BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31m\u202egnp.exe\u2066x\u2069\u2028L2\u2029P2\x9b1m\x85\x7f\x08\r\t\x0b"

AUTO_RUN = "20261129-181521.715955568-1"  # has build_evidence and a planning leg
PLAIN_RUN = "20261129-181512.929654081-1"
RUN_A = "20261129-100000.000000001-1"
RUN_B = "20261129-100000.000000002-1"
HOSTILE_RUN = "evil" + HOSTILE.replace("\r", "") + "-run"
HOSTILE_PLAN = "plan" + HOSTILE + "-x"
HOSTILE_LABEL = "lab" + HOSTILE


def raw_controls(text: str) -> list[str]:
    """Characters a terminal would act on instead of showing: C0 (bar our newline),
    DEL, C1, bidi overrides/isolates/marks, line and paragraph separators."""
    return sorted({f"U+{ord(ch):04X}" for ch in text
                   if (unicodedata.category(ch) == "Cc" and ch != "\n") or ch in BIDI or ch in "\u2028\u2029"})


def cli(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, timeout=120)


def inert(result: subprocess.CompletedProcess, what: str, codes: tuple = (0,)) -> str:
    assert result.returncode in codes, (what, result.returncode, result.stderr[-2000:])
    assert b"Traceback" not in result.stderr, result.stderr[-2000:]
    text = (result.stdout + result.stderr).decode("utf-8")  # valid UTF-8, whatever the input was
    assert raw_controls(text) == [], f"{what}: {raw_controls(text)} reached the terminal"
    return text


def copy_run(source: str, home: Path, name: str, **state_changes) -> Path:
    """A corpus run under another directory name, its run_id rewritten to match."""
    target = home / "runs" / name
    shutil.copytree(CORPUS_HOME / "runs" / source, target)
    lines = []
    for line in (target / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        event["run_id"] = name
        lines.append(json.dumps(event) + "\n")
    (target / "events.jsonl").write_text("".join(lines))
    state = json.loads((target / "state.json").read_text())
    state["run_id"] = name
    for key, value in state_changes.items():
        if key == "graph_name":
            state["graph"]["name"] = value
        else:
            state[key] = value
    (target / "state.json").write_text(json.dumps(state))
    return target


@pytest.fixture
def hostile_home(tmp_path) -> tuple[Path, Path]:
    home = tmp_path / "home"
    copy_run(AUTO_RUN, home, RUN_A, runtime="@SUM(1+1)" + HOSTILE, graph_name="=cmd|' /C calc'!A0" + HOSTILE,
             build_evidence={"answer": "declared" + HOSTILE, "declared_by": "-2+3" + HOSTILE})
    copy_run(PLAIN_RUN, home, RUN_B, runtime="+claude" + HOSTILE)
    bad = copy_run(PLAIN_RUN, home, HOSTILE_RUN)
    with open(bad / "events.jsonl", "a") as stream:
        stream.write("not json \x1b[31m\x07\u202e\n")
    plan = home / "plans" / HOSTILE_PLAN
    plan.mkdir(parents=True)
    (plan / "graph.json").write_text("not json \x1b]0;t\x07")
    db = tmp_path / "ledger.sqlite"
    return home, db


def synced(hostile_home) -> Path:
    home, db = hostile_home
    result = cli("sync", "--db", db, "--home", f"{HOSTILE_LABEL}={home}")
    assert result.returncode == 0, result.stderr[-2000:]  # its output: test_sync_problem_lines_are_inert
    return db


def test_sync_problem_lines_are_inert(hostile_home):
    home, db = hostile_home
    result = cli("sync", "--db", db, "--home", f"{HOSTILE_LABEL}={home}")
    text = inert(result, "sync")
    problems = [line for line in result.stderr.decode().splitlines() if line.startswith("omg-ledger: problem:")]
    # The bad stream line and the bad plan graph.json are reported, one line each,
    # their directory names shown with visible escapes.
    assert any("evil\\x1b" in line and "\\u202e" in line for line in problems), text
    assert any("plan\\x1b" in line and "graph.json" in line for line in problems), text
    assert all(line.count("omg-ledger:") == 1 for line in problems)


def test_reports_are_inert(hostile_home):
    db = synced(hostile_home)
    runs = inert(cli("runs", "--db", db), "runs")
    assert "\\x1b]0;pwned" in runs  # shown, not interpreted
    for run in (RUN_A, RUN_B):
        shown = inert(cli("show", "--db", db, run), f"show {run}")
        assert "runtime " in shown
    assert "\\u202e" in inert(cli("show", "--db", db, RUN_A), "show")
    audit = inert(cli("audit", "--db", db), "audit", codes=(0, 1))
    assert "declared\\x1b" in audit  # the build-evidence answer, visible
    for by in ("run", "node", "runtime"):
        inert(cli("cost", "--db", db, "--by", by), f"cost --by {by}")
    inert(cli("sql", "--db", db, "SELECT run_id, runtime, graph_name FROM runs"), "sql")


def test_the_ambiguous_prefix_error_is_one_inert_line(hostile_home):
    db = synced(hostile_home)
    result = cli("show", "--db", db, "20261129-100000")
    text = inert(result, "show <ambiguous>", codes=(2,))
    assert result.stdout == b""
    assert text.count("\n") == 1 and text.startswith("omg-ledger: error: "), text
    assert RUN_A in text and RUN_B in text and "lab\\x1b" in text


def test_a_hostile_prefix_in_the_not_found_error_is_inert(hostile_home):
    db = synced(hostile_home)
    text = inert(cli("show", "--db", db, "nope\x1b[2J\u202e\u2028x"), "show <missing>", codes=(2,))
    assert text.count("\n") == 1, text


def inert_json(result: subprocess.CompletedProcess, what: str, codes: tuple = (0,)) -> object:
    inert(result, what, codes)
    return json.loads(result.stdout)


def csv_rows(result: subprocess.CompletedProcess) -> list[list[str]]:
    inert(result, "csv")
    return list(csv.reader(io.StringIO(result.stdout.decode())))


def test_cost_csv_cells_cannot_be_formulas(hostile_home):
    db = synced(hostile_home)
    keys = {}
    for by in ("run", "node", "runtime"):
        rows = csv_rows(cli("cost", "--db", db, "--csv", "--by", by))
        assert rows[0][0] == "key"
        keys[by] = [row[0] for row in rows[1:]]
        for row in rows[1:]:
            for cell in row:
                assert cell[:1] not in ("=", "+", "-", "@"), (by, row)
            # the numbers stay numbers: cost_usd, cost_nano_usd (empty: no known price), the counts
            if row[1] or row[2]:
                float(row[1]), int(row[2])
            int(row[4])
    assert any(k.startswith("'@SUM(1+1)\\x1b") for k in keys["runtime"]), keys["runtime"]
    assert any(k.startswith("'+claude") for k in keys["runtime"]), keys["runtime"]
    assert any(k.startswith("'=cmd|") for k in keys["node"]), keys["node"]
    assert "TOTAL" not in keys["run"]  # only with --total


def test_sql_csv_cells_cannot_be_formulas_and_numbers_stay_numbers(hostile_home):
    db = synced(hostile_home)
    rows = csv_rows(cli("sql", "--db", db, "--csv",
                        "SELECT '=1+1' AS f, '-5' AS s, -5 AS n, 2.5 AS x, '+x' AS p, '@y' AS a, "
                        "char(9) || 'tab' AS t, char(13) || 'cr' AS r, 'a' || char(27) || '[2J' AS e, "
                        "'x' || char(10) || 'y' AS nl, NULL AS z, 'plain' AS ok, '=h' AS \"=head\""))
    assert rows == [
        ["f", "s", "n", "x", "p", "a", "t", "r", "e", "nl", "z", "ok", "'=head"],
        ["'=1+1", "'-5", "-5", "2.5", "'+x", "'@y", "\\x09tab", "\\x0dcr", "a\\x1b[2J", "x\\x0ay", "", "plain", "'=h"],
    ]


def test_json_is_exact_and_still_inert(hostile_home):
    """--json is for programs: the values are exactly what the files said, and the
    characters a terminal acts on are \\u escapes (valid JSON, same value)."""
    db = synced(hostile_home)
    shown = inert_json(cli("show", "--db", db, "--json", RUN_A), "show --json")
    assert shown["runtime"] == "@SUM(1+1)" + HOSTILE
    listed = inert_json(cli("runs", "--db", db, "--json"), "runs --json")
    assert {r["run_id"] for r in listed} >= {RUN_A, RUN_B}
    assert any(r["graph"] == "=cmd|' /C calc'!A0" + HOSTILE for r in listed)
    audit = inert_json(cli("audit", "--db", db, "--json"), "audit --json", codes=(0, 1))
    evidence = next(r for r in audit["build_evidence"]["runs"] if r["run_id"] == RUN_A)
    assert evidence["answer"] == "declared" + HOSTILE
    sync = inert_json(cli("sync", "--db", db, "--home", str(hostile_home[0]), "--json"), "sync --json")
    assert isinstance(sync["problems"], list)


def test_runner_invocation_reports_are_inert(tmp_path):
    """A runner's events.jsonl is input too: hostile roles, milestones and statuses."""
    stream = tmp_path / "events.jsonl"
    role, milestone, status = "=role" + HOSTILE, "@M1" + HOSTILE, "-FAILED" + HOSTILE
    lines = [{"ts": "2024-05-01T10:00:00.000Z", "role": role, "milestone": milestone, "event": "start"},
             {"ts": "2024-05-01T10:00:05.000Z", "role": role, "milestone": milestone, "event": "end",
              "status": status, "duration_ms": 5000},
             {"ts": "2024-05-01T10:01:00.000Z", "role": role, "milestone": milestone, "event": "start"}]
    stream.write_text("".join(json.dumps(line) + "\n" for line in lines) + "not json \x1b[2J\u202e\n")
    db = tmp_path / "ledger.sqlite"
    (tmp_path / "empty-home").mkdir()
    inert(cli("sync", "--db", db, "--home", tmp_path / "empty-home", "--invocations", stream), "sync --invocations")
    for by in ("role", "status", "milestone"):
        text = inert(cli("invocations", "--db", db, "--by", by), f"invocations --by {by}")
        assert "\\x1b]0;pwned" in text  # the role, shown in the dangling list at least
        rows = csv_rows(cli("invocations", "--db", db, "--csv", "--by", by))
        assert rows[0][0] == "key", rows
        assert all(cell[:1] not in ("=", "+", "-", "@") for row in rows[1:] for cell in row), rows
        assert any(row[0].startswith(("'=role", "'@M1", "'-FAILED")) for row in rows[1:]), rows
