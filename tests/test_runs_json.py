"""`runs --json` byte for byte: one array, one compact object a line, in the documented
field order, written in chunks that join into exactly one document.

Expectations come from the contract (README's `runs --json` field list, the engine's
truth/runs-list.txt statuses) and from hand-written text, never from the code's output.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from decimal import Decimal

import pytest

from omg_ledger import cli, render
from omg_ledger.reports.runs import LIST_COLUMNS, _money, run_summary
from omg_ledger.status import PAUSED

from .conftest import CORPUS_HOME
from .test_corpus import ENGINE

# README.md, "runs --json": the fields, in this order.
DOCUMENTED_FIELDS = [
    "run_id", "home", "graph", "runtime", "status", "nodes_total", "nodes_passed", "leg_count", "cost_usd",
    "cost_nano_usd", "invocations", "unknown_cost_invocations", "unrecorded_attempts", "input_tokens",
    "cached_input_tokens", "output_tokens", "reasoning_output_tokens", "started_at", "last_event_at", "gone",
    "has_snapshot", "paused_for", "gate", "nodes_interrupted", "hint"]


@pytest.fixture(scope="module")
def corpus_db(tmp_path_factory) -> str:
    db = str(tmp_path_factory.mktemp("runs-json") / "ledger.sqlite")
    subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", db, "--home", f"corpus={CORPUS_HOME}"],
                   capture_output=True, check=True)
    return db


def _runs_json(db: str, *args: str) -> bytes:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", "runs", "--json", "--db", db, *args],
                          capture_output=True, check=True).stdout


def test_runs_json_on_the_corpus_is_one_compact_object_a_line_in_the_documented_order(corpus_db):
    out = _runs_json(corpus_db)
    assert out.startswith(b"[\n  {") and out.endswith(b"}\n]\n")
    lines = out.decode().split("\n")
    assert lines[0] == "[" and lines[-2:] == ["]", ""]
    items = lines[1:-2]
    assert len(items) == len(ENGINE) == 25
    for n, line in enumerate(items):
        assert line.startswith("  {")
        assert line.endswith(",") == (n < len(items) - 1)
        text = line[2:].removesuffix(",")
        row = json.loads(text)
        assert list(row) == DOCUMENTED_FIELDS
        # Compact: no space after a separator outside strings.
        assert text == json.dumps(row, separators=(",", ":"), ensure_ascii=False)
    rows = json.loads(out)
    assert [r["run_id"] for r in rows] == sorted(ENGINE, reverse=True)  # newest first
    for row in rows:
        assert row["status"] == ENGINE[row["run_id"]]["status"], row["run_id"]
        assert row["home"] == "corpus"
        assert row["graph"] == ENGINE[row["run_id"]]["graph"] or ENGINE[row["run_id"]]["graph"] == "-"
        nanos = row["cost_nano_usd"]
        assert row["cost_usd"] == (None if nanos is None else float(Decimal(nanos) / 1_000_000_000))
        assert (row["paused_for"] is not None) == (row["status"] == PAUSED)


def test_runs_json_with_nothing_to_list_is_an_empty_array(corpus_db):
    assert _runs_json(corpus_db, "--status", "RUNNING") == b"[\n]\n"


def test_runs_json_limit_writes_the_newest_rows_of_the_whole_listing(corpus_db):
    whole = json.loads(_runs_json(corpus_db))
    assert json.loads(_runs_json(corpus_db, "--limit", "3")) == whole[:3]


ITEMS = [{"a": 1, "b": None}, {"text": "x\u202ey\u2028"}, {"dash": "a\u2014b\x7f", "n": 0.0456}, {"tab": "\t"}]
# By hand: RLO, LINE SEPARATOR and DEL written as \u escapes; the em dash (harmless) stays.
EXPECTED = ('[\n  {"a":1,"b":null},\n  {"text":"x\\u202ey\\u2028"},\n  {"dash":"a\u2014b\\u007f","n":0.0456},'
            '\n  {"tab":"\\t"}\n]\n')


@pytest.mark.parametrize("chunk_bytes", [1, 25, 1 << 18])
def test_json_array_written_in_chunks_is_the_same_document(monkeypatch, chunk_bytes):
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="utf-8", write_through=False)
    monkeypatch.setattr(sys, "stdout", stdout)
    stdout.write("before:")  # held by the text layer: must come out first
    cli._emit_json_array(iter(ITEMS), chunk_bytes)
    stdout.flush()
    assert raw.getvalue().decode() == "before:" + EXPECTED


def test_json_array_on_a_text_only_stdout(monkeypatch):
    stdout = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    cli._emit_json_array(iter(ITEMS), 10)
    assert stdout.getvalue() == EXPECTED


def test_empty_json_array(monkeypatch):
    stdout = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    cli._emit_json_array(iter([]))
    assert stdout.getvalue() == "[\n]\n"


@pytest.mark.parametrize("nanos", [0, 1, 7, 999_999_999, 1_000_000_000, 45_600_000, 123_456_789_012,
                                   2**53 - 1, 2**53, 2**53 + 1, 10**18 + 7, 2**63 - 1,
                                   3_604_358_849_273_050_034])  # the last: float(n) / 1e9 rounds twice, differently
def test_money_is_the_exact_quotient_rounded_once(nanos):
    assert _money(nanos) == float(Decimal(nanos) / Decimal(1_000_000_000))


def test_money_of_nothing_is_none():
    assert _money(None) is None


def test_listing_row_reads_each_field_from_its_own_column():
    # A distinct value per column: a field read from the wrong position shows at once.
    row = {name: f"<{name}>" for name in LIST_COLUMNS}
    row.update({"id": 1, "cost_nano_usd": 2_500_000_000, "unrecorded_attempts": 3, "gone": 0, "any_leg": 1,
                "last_leg_open": 0, "last_outcome": "passed", "snapshot_schema": 1, "has_state": 1,
                "all_nodes_passed": 1})
    summary = run_summary(row, "PASS", "<label>")
    expected_from = {"run_id": "run_id", "graph": "graph_name", "runtime": "runtime", "nodes_total": "node_count",
                     "nodes_passed": "nodes_passed", "leg_count": "leg_count", "invocations": "invocations",
                     "unknown_cost_invocations": "unknown_cost_invocations", "input_tokens": "input_tokens",
                     "cached_input_tokens": "cached_input_tokens", "output_tokens": "output_tokens",
                     "reasoning_output_tokens": "reasoning_output_tokens", "started_at": "first_event_at",
                     "last_event_at": "last_event_at", "gate": "gate_paused_at"}
    for field, column in expected_from.items():
        assert summary[field] == f"<{column}>", field
    assert summary["home"] == "<label>"
    assert summary["cost_usd"] == 2.5 and summary["cost_nano_usd"] == 2_500_000_000
    assert summary["unrecorded_attempts"] == 3 and summary["gone"] is False and summary["has_snapshot"] is True
    assert summary["paused_for"] is None and summary["hint"] is None and summary["nodes_interrupted"] == 0


def test_inert_escapes_every_ascii_control_and_del_and_nothing_else_ascii():
    # By hand from render's contract: C0 controls and DEL become \xNN; printable ASCII stays;
    # keep_newlines keeps the line feed (and only it).
    for code in range(128):
        ch = chr(code)
        escaped = f"\\x{code:02x}"
        unsafe = code < 0x20 or code == 0x7F
        assert render.inert(f"a{ch}b") == (f"a{escaped}b" if unsafe else f"a{ch}b"), code
        kept = unsafe and ch != "\n"
        assert render.inert(f"a{ch}b", keep_newlines=True) == (f"a{escaped}b" if kept else f"a{ch}b"), code
    assert render.inert("caf\u00e9 \u2014 \u202e\u0085") == "caf\u00e9 \u2014 \\u202e\\x85"
    assert render.inert(None) == "" and render.inert(42) == "42"


def test_json_inert_utf8_is_json_inert_on_the_text():
    for text in ['"plain"', '"del\x7f"', '"dash \u2014"', '"rlo \u202e ls \u2028 nel \u0085"']:
        assert render.json_inert_utf8(text.encode()) == render.json_inert(text).encode(), text
    assert render.json_inert_utf8(b'"a\x7fb"') == b'"a\\u007fb"'
