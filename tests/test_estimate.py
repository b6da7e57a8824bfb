"""`--estimate`: unpriced work priced from its tokens with the price book, kept apart
from known spend. Expectations are computed by hand from the token counts written in
the fixtures and the prices written in the test books below (never from the code)."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sqlite3
import subprocess
import sys
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from omg_ledger.cli import main
from omg_ledger.errors import BadArgument
from omg_ledger.prices import (
    SHIPPED,
    book_path,
    cost_nanos,
    estimate,
    load_book,
    parse_book,
    why_not,
)
from omg_ledger.reports.cost import cost_report
from tests import test_cost
from tests.cli_checks import one_line_error
from tests.test_cost import NOW, TOTAL, A, ev, ledger, nanos, state, t, write_run

scenario_home = test_cost.scenario_home  # the cost tests' fixture, used here too

# Distinct prices so that every term of the formula shows in the result.
BOOK = """
schema = 1
[runtime.codex]
model = "test-codex"
source = "tests"
valid_from = 2026-11-01
input_per_mtok = 1
cached_input_per_mtok = 0.1
output_per_mtok = 10
reasoning_output_per_mtok = 20
input_includes_cached = true
output_includes_reasoning = true

[runtime.claude]
model = "test-claude"
source = "tests"
valid_from = 2026-11-01
input_per_mtok = 3
cached_input_per_mtok = 0.3
output_per_mtok = 15
reasoning_output_per_mtok = 15
input_includes_cached = true
output_includes_reasoning = true
"""

# Scenario run A (Codex): scan 1000/400/200/50, fix 2000/600/300/70 (input/cached/output/reasoning).
#   scan: (1000-400)*1 + 400*0.1 + (200-50)*10 + 50*20 = 600 + 40 + 1500 + 1000 = 3140 µ$ = 3_140_000 n$
#   fix:  (2000-600)*1 + 600*0.1 + (300-70)*10 + 70*20 = 1400 + 60 + 2300 + 1400 = 5160 µ$ = 5_160_000 n$
SCAN_NANOS, FIX_NANOS = 3_140_000, 5_160_000


def book(text: str = BOOK, path: str = "test-book.toml"):
    return parse_book(text, path)


def charge(runtime="codex", tokens=(0, 0, 0, 0), graph="g", node_id="n") -> dict:
    keys = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
    return {"runtime": runtime, "graph": graph, "node_id": node_id, **dict(zip(keys, tokens, strict=True))}


# -- the formula -------------------------------------------------------------------------


def test_formula_inclusive_fields_hand_computed():
    b = book()
    assert estimate(b, charge(tokens=(1000, 400, 200, 50))) == SCAN_NANOS
    assert estimate(b, charge(tokens=(2000, 600, 300, 70))) == FIX_NANOS
    # no cache, no reasoning: 900*1 + 120*10 = 2100 µ$
    assert estimate(b, charge(tokens=(900, 0, 120, 0))) == 2_100_000


def test_formula_exclusive_fields_hand_computed():
    exclusive = BOOK.replace("input_includes_cached = true\noutput_includes_reasoning = true\n\n[runtime.claude]",
                             "input_includes_cached = false\noutput_includes_reasoning = false\n\n[runtime.claude]")
    b = book(exclusive)
    assert b.runtimes["codex"].input_includes_cached is False
    # 1000*1 + 400*0.1 + 200*10 + 50*20 = 1000 + 40 + 2000 + 1000 = 4040 µ$
    assert estimate(b, charge(tokens=(1000, 400, 200, 50))) == 4_040_000


def test_formula_clamps_contradictory_counts_at_zero():
    # cached > input and reasoning > output cannot both be inside: the difference counts as 0
    # 0*1 + 500*0.1 + 0*10 + 30*20 = 50 + 600 = 650 µ$
    assert estimate(book(), charge(tokens=(400, 500, 20, 30))) == 650_000


def test_rounding_is_once_per_invocation_half_even():
    rates = book(BOOK.replace("input_per_mtok = 1\n", "input_per_mtok = 0.0015\n", 1)).runtimes["codex"]
    assert rates.input_per_mtok == Decimal("0.0015")  # 1.5 n$ per fresh input token
    assert cost_nanos(rates, 1, 0, 0, 0) == 2  # 1.5 -> 2
    assert cost_nanos(rates, 3, 0, 0, 0) == 4  # 4.5 -> 4
    assert cost_nanos(rates, 5, 0, 0, 0) == 8  # 7.5 -> 8


def test_no_tokens_and_no_price_are_not_estimated():
    b = book()
    assert estimate(b, charge(runtime="claude")) is None and why_not(b, charge(runtime="claude")) == "no tokens"
    assert why_not(b, charge(runtime=None, tokens=(10, 0, 1, 0))) == "no price"  # run without a snapshot
    assert why_not(b, charge(runtime="gemini", tokens=(10, 0, 1, 0))) == "no price"


def test_graph_and_node_overrides_node_wins():
    b = book(BOOK + '\n[graph."g"]\ninput_per_mtok = 2\nmodel = "bigger"\n[node."g/n"]\ninput_per_mtok = 4\n')
    # 100 fresh input tokens only: the runtime says 100 µ$, graph g 200 µ$, node g/n 400 µ$
    assert estimate(b, charge(tokens=(100, 0, 0, 0), graph="other", node_id="n")) == 100_000
    assert estimate(b, charge(tokens=(100, 0, 0, 0), graph="g", node_id="m")) == 200_000
    assert estimate(b, charge(tokens=(100, 0, 0, 0), graph="g", node_id="n")) == 400_000
    assert b.rates_for("codex", "g", "m").model == "bigger"
    # an override never invents a price for a runtime the book does not price
    assert estimate(b, charge(runtime="gemini", tokens=(100, 0, 0, 0), graph="g", node_id="n")) is None


def test_overrides_take_the_keys_cost_by_node_prints_for_spend_of_no_node_and_no_graph():
    b = book(BOOK + '\n[node."g/(planning)"]\ninput_per_mtok = 4\n[graph."(no graph)"]\ninput_per_mtok = 3\n'
                    '[node."(no graph)/(refused)"]\ninput_per_mtok = 5\n')
    # 100 fresh input tokens: the runtime says 100 µ$; the planner's call of graph g 400 µ$
    # (its key g/(planning)), a refused plan's with no graph 500 µ$, any other 300 µ$.
    planner = {**charge(tokens=(100, 0, 0, 0), graph="g", node_id=None), "charge_kind": "planning"}
    assert estimate(b, planner) == 400_000
    assert estimate(b, {**planner, "charge_kind": "assessment"}) == 100_000
    refused = {**charge(tokens=(100, 0, 0, 0), graph=None, node_id=None), "kind": "refused"}  # as show has it
    assert estimate(b, refused) == 500_000
    assert estimate(b, {**refused, "kind": "planning"}) == 300_000


# -- the shipped book ----------------------------------------------------------------------


def test_shipped_book_prices_both_runtimes_and_says_where_from():
    shipped = load_book(str(SHIPPED))
    assert set(shipped.runtimes) == {"claude", "codex"}
    for rates in shipped.runtimes.values():
        assert isinstance(rates.valid_from, date) and rates.source.startswith("https://") and rates.model
        assert rates.input_includes_cached and rates.output_includes_reasoning
    text = SHIPPED.read_text()
    assert "RECORDS NO MODEL NAME" in text and "includes the cached tokens" in text


def test_shipped_book_on_the_corpus_codex_runs(db_url, corpus_home):
    # Codex list prices in the shipped book: $5 input, $0.50 cached, $30 output and reasoning.
    # The corpus' six Codex charges (s18: scan, fix, note; s32: planning, survey, edit):
    #   scan     1100*5 + 4100*0.5 + 390*30 + 220*30 = 25850 µ$
    #   fix      2800*5 + 6000*0.5 + 800*30 + 700*30 = 62000
    #   note      900*5 +    0     + 120*30 +   0    =  8100
    #   planning  600*5 + 1500*0.5 + 256*30 +  64*30 = 13350
    #   survey   1000*5 + 3000*0.5 + 300*30 + 200*30 = 21500
    #   edit     2000*5 + 5000*0.5 + 600*30 + 300*30 = 39500     sum 170300 µ$
    shipped = load_book(str(SHIPPED))
    assert shipped.runtimes["codex"].input_per_mtok == Decimal("5.00")
    report = cost_report(ledger(db_url, corpus_home, "corpus"), by="runtime", tz="UTC", now=NOW, prices=shipped)
    codex = next(r for r in report["rows"] if r["key"] == "codex")
    assert (codex["estimated_nano_usd"], codex["estimated_invocations"], codex["unestimated_invocations"]) == \
        (170_300_000, 6, 0)
    assert codex["cost_nano_usd"] == 0  # the estimate is never known spend
    assert report["total"]["estimated_nano_usd"] == 170_300_000


# -- where the book comes from ----------------------------------------------------------------


def test_book_search_order(tmp_path, monkeypatch):
    assert book_path() == SHIPPED
    config = tmp_path / "config"
    (config / "omg-ledger").mkdir(parents=True)
    (config / "omg-ledger" / "prices.toml").write_text(BOOK)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    assert book_path() == config / "omg-ledger" / "prices.toml"
    monkeypatch.setenv("OMG_LEDGER_PRICES", str(tmp_path / "env.toml"))
    assert book_path() == tmp_path / "env.toml"
    assert book_path(str(tmp_path / "flag.toml")) == tmp_path / "flag.toml"


def test_user_config_default_is_home_dot_config(tmp_path, monkeypatch):
    home = Path.home()  # the hermetic fake home
    (home / ".config" / "omg-ledger").mkdir(parents=True)
    (home / ".config" / "omg-ledger" / "prices.toml").write_text(BOOK)
    assert load_book().runtimes["codex"].model == "test-codex"


@pytest.mark.parametrize("text, message", [
    ("schema = 1\n[runtime.codex\n", "not valid TOML"),
    (BOOK.replace("schema = 1", "schema = 2"), "schema = 1 expected"),
    (BOOK.replace("output_per_mtok = 10\n", "output_per_mtok = -10\n", 1), ">= 0"),
    (BOOK.replace("output_per_mtok = 10\n", 'output_per_mtok = "ten"\n', 1), "must be a number"),
    (BOOK.replace("output_per_mtok = 10\n", "", 1), "lacks output_per_mtok"),
    (BOOK.replace("output_per_mtok = 10\n", "output_per_mtk = 10\n", 1), "unknown key(s) output_per_mtk"),
    (BOOK.replace("valid_from = 2026-11-01\n", 'valid_from = "soon"\n', 1), "valid_from must be a TOML date"),
    (BOOK + '[graph."g"]\ninput_per_mtok = true\n', "must be a number"),
    ("schema = 1\n", "no [runtime.<name>] table"),
], ids=["toml", "schema", "negative", "string", "missing", "typo", "date", "override", "empty"])
def test_bad_books_are_one_clear_error(text, message):
    with pytest.raises(BadArgument, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        parse_book(text, "bad.toml")


def test_cli_bad_book_is_exit_2_one_line(sqlite_url, tmp_path, scenario_home):
    ledger(sqlite_url, scenario_home)
    bad = tmp_path / "bad.toml"
    bad.write_text(BOOK.replace("output_per_mtok = 10\n", "output_per_mtok = -10\n", 1))
    result = CliRunner().invoke(main, ["cost", "--db", sqlite_url, "--estimate", "--prices", str(bad)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.strip().count("\n") == 0 and "omg-ledger: error: price book" in result.output
    missing = CliRunner().invoke(main, ["cost", "--db", sqlite_url, "--estimate", "--prices", str(tmp_path / "no")])
    assert missing.exit_code == 2 and "cannot read price book" in missing.output


def _run_cli(*args: str, env: dict | None = None, pass_fds: tuple[int, ...] = ()) -> subprocess.CompletedProcess:
    """The CLI as its own process, its address space capped: a device read without end
    fails there with MemoryError instead of filling this machine's memory."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    try:
        return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *args], capture_output=True, text=True,
                              timeout=60, env={**os.environ, **(env or {})}, pass_fds=pass_fds, preexec_fn=cap)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args)} blocked")


def test_a_book_or_config_that_is_a_device_or_a_pipe_is_read_to_a_bound(sqlite_url, tmp_path, estimate_home):
    """A file named on purpose is read whatever it is, to a bound: /dev/null is an empty
    file (a config without limits; a book without its schema line), /dev/zero would be
    read until memory ran out (one line, exit 2, at 8 MiB), and a pipe is read:
    `--prices <(cat book.toml)` hands over /dev/fd/N, and a named FIFO is a pipe too."""
    ledger(sqlite_url, estimate_home)
    line = one_line_error(_run_cli("cost", "--db", sqlite_url, "--estimate", "--prices", "/dev/zero"), 2)
    assert "price book /dev/zero holds more than 8 MiB: not read" in line
    line = one_line_error(_run_cli("limits", "--db", sqlite_url, env={"OMG_LEDGER_CONFIG": "/dev/zero"}), 2)
    assert "config file /dev/zero holds more than 8 MiB: not read" in line
    line = one_line_error(_run_cli("cost", "--db", sqlite_url, "--estimate", "--prices", "/dev/null"), 2)
    assert "price book /dev/null: schema = 1 expected" in line
    empty = _run_cli("limits", "--db", sqlite_url, "--json", "--limit", "day=50", env={"OMG_LEDGER_CONFIG": "/dev/null"})
    assert empty.returncode == 0, empty.stderr
    assert [limit["limit"] for limit in json.loads(empty.stdout)["limits"]] == ["day"]

    read_end, write_end = os.pipe()  # what <(cat book.toml) gives the command
    os.write(write_end, BOOK.encode())  # (the book fits in the pipe's buffer)
    os.close(write_end)
    try:
        piped = _run_cli("cost", "--db", sqlite_url, "--tz", "UTC", "--estimate", "--json",
                         "--prices", f"/dev/fd/{read_end}", pass_fds=(read_end,))
    finally:
        os.close(read_end)
    assert piped.returncode == 0, piped.stderr
    doc = json.loads(piped.stdout)
    assert doc["total"]["estimated_nano_usd"] == SCAN_NANOS + FIX_NANOS
    assert doc["price_book"]["path"] == f"/dev/fd/{read_end}"

    book_file, fifo = tmp_path / "prices.toml", tmp_path / "prices.fifo"
    book_file.write_text(BOOK)
    os.mkfifo(fifo)
    writer = subprocess.Popen([sys.executable, "-c", "import sys; open(sys.argv[2], 'w').write(open(sys.argv[1]).read())",
                               str(book_file), str(fifo)])
    try:
        named = _run_cli("cost", "--db", sqlite_url, "--tz", "UTC", "--estimate", "--json", "--prices", str(fifo))
    finally:
        if writer.poll() is None:  # the FIFO was never opened for reading: the writer waits for ever
            writer.kill()
        writer.wait()
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["total"]["estimated_nano_usd"] == SCAN_NANOS + FIX_NANOS


# -- cost --estimate ---------------------------------------------------------------------------


@pytest.fixture
def estimate_home(scenario_home) -> Path:
    """The cost scenario plus the two unpriced charges that cannot be estimated."""
    killed = "20261129-113000.000000001-1"  # a Claude call killed by its timeout: no cost, no usage
    write_run(scenario_home, killed, [
        ev(killed, t("11:30:00"), "run_started"),
        ev(killed, t("11:30:01"), "node_started", node_id="slow"),
        ev(killed, t("11:30:09"), "node_failed", node_id="slow", verdict="FAIL", cost_unknown=True,
           detail="timed out after 8s"),
        ev(killed, t("11:30:10"), "run_finished", outcome="failed"),
    ], state(killed, "slow-graph", {"slow": {"verdict": "FAIL", "cost_unknown": True, "detail": "timed out"}}))
    refused = "20261129-114000.000000001-1"  # a plan refused before state.json: runtime unknown
    write_run(scenario_home, refused, [
        ev(refused, t("11:40:00"), "run_started", phase="planning"),
        ev(refused, t("11:40:01"), "run_finished", outcome="failed", cost_unknown=True,
           usage={"input_tokens": 100, "output_tokens": 10}),
    ])
    return scenario_home


def test_cost_estimate_by_run_and_total(db_url, estimate_home):
    report = cost_report(ledger(db_url, estimate_home), by="run", tz="UTC", now=NOW, prices=book())
    rows = {r["key"]: r for r in report["rows"]}
    assert (rows[A]["estimated_nano_usd"], rows[A]["estimated_invocations"], rows[A]["unestimated_invocations"]) == \
        (SCAN_NANOS + FIX_NANOS, 2, 0)
    assert rows[A]["estimated_usd"] == 0.0083
    killed = rows["20261129-113000.000000001-1"]
    assert (killed["estimated_nano_usd"], killed["unestimated_invocations"]) == (0, 1)
    total = report["total"]
    assert total["cost_nano_usd"] == nanos(TOTAL)  # known spend unchanged by the estimate
    assert (total["estimated_nano_usd"], total["estimated_invocations"], total["unestimated_invocations"]) == \
        (8_300_000, 2, 2)
    assert total["unknown_cost_invocations"] == 4
    assert total["unestimated_reasons"] == {"no tokens": 1, "no price": 1}
    assert report["price_book"]["path"] == "test-book.toml"
    assert report["price_book"]["valid_from"] == {"claude": "2026-11-01", "codex": "2026-11-01"}


def test_cost_estimate_by_day_node_runtime(db_url, estimate_home):
    engine = ledger(db_url, estimate_home)
    by_day = cost_report(engine, by="day", tz="UTC", now=NOW, prices=book())
    assert {r["key"]: r["estimated_nano_usd"] for r in by_day["rows"]} == {"2026-11-29": 8_300_000, "2026-11-30": 0}
    by_node = {r["key"]: r for r in cost_report(engine, by="node", tz="UTC", now=NOW, prices=book())["rows"]}
    assert by_node["codex-graph/scan"]["estimated_nano_usd"] == SCAN_NANOS
    assert by_node["codex-graph/fix"]["estimated_nano_usd"] == FIX_NANOS
    assert by_node["(no graph)/(refused)"]["unestimated_invocations"] == 1
    by_runtime = {r["key"]: r for r in cost_report(engine, by="runtime", tz="UTC", now=NOW, prices=book())["rows"]}
    assert by_runtime["codex"]["estimated_nano_usd"] == 8_300_000
    assert by_runtime["claude"]["unestimated_invocations"] == 1
    # a window that leaves out run A's charges leaves out their estimate
    late = cost_report(engine, since="2026-11-29T11:00:00Z", tz="UTC", now=NOW, prices=book())
    assert late["total"]["estimated_nano_usd"] == 0 and late["total"]["unestimated_invocations"] == 2


def test_without_the_flag_nothing_changes(sqlite_url, estimate_home):
    ledger(sqlite_url, estimate_home)
    runner = CliRunner()
    plain = json.loads(runner.invoke(main, ["cost", "--db", sqlite_url, "--by", "run", "--tz", "UTC", "--json"]).output)
    assert "price_book" not in plain
    assert not any(k.startswith(("estimated", "unestimated")) for r in [*plain["rows"], plain["total"]] for k in r)
    text = runner.invoke(main, ["cost", "--db", sqlite_url, "--tz", "UTC"]).output
    assert "estimate" not in text.lower()


@pytest.mark.parametrize("command", [["cost"], ["runs"], ["show", "20261129-113000.000000001-1"], ["audit"],
                                     ["limits", "--limit", "day=100"], ["report", "--html", "page.html"]])
def test_prices_without_estimate_is_a_usage_error_not_ignored(sqlite_url, tmp_path, estimate_home, command):
    """`cost --prices book.toml` printed known spend alone, exit 0, as if the book priced
    nothing: --prices is only read by --estimate. Named in the environment it stays a
    default (OMG_LEDGER_PRICES set for every command), never an error."""
    ledger(sqlite_url, estimate_home)
    book = tmp_path / "book.toml"
    book.write_text(BOOK)
    command = [str(tmp_path / part) if part == "page.html" else part for part in command]
    runner = CliRunner()
    flag = runner.invoke(main, [*command, "--db", sqlite_url, "--prices", str(book)])
    assert flag.exit_code == 2, flag.output
    assert flag.output == (f"omg-ledger: error: --prices {book} is the price book of --estimate, which was not "
                           f"given: add --estimate (without it nothing is estimated)\n")
    env = runner.invoke(main, [*command, "--db", sqlite_url], env={"OMG_LEDGER_PRICES": str(book)})
    assert env.exit_code in (0, 1) and "error" not in env.output, env.output
    both = runner.invoke(main, [*command, "--db", sqlite_url, "--prices", str(book), "--estimate"])
    assert both.exit_code in (0, 1) and "error" not in both.output, both.output


def test_cli_estimate_three_figures_and_nothing_written(sqlite_url, tmp_path, estimate_home):
    ledger(sqlite_url, estimate_home)
    path = sqlite_url.removeprefix("sqlite:///")
    before = hashlib.sha256("\n".join(sqlite3.connect(path).iterdump()).encode()).hexdigest()
    prices = tmp_path / "prices.toml"
    prices.write_text(BOOK)
    runner = CliRunner()
    result = runner.invoke(main, ["cost", "--db", sqlite_url, "--tz", "UTC", "--estimate", "--prices", str(prices)])
    assert result.exit_code == 0, result.output
    # known $0.4514; estimate 8_300_000 n$ = $0.0083; 2 of the 4 unpriced estimated
    assert "$0.4514 known + ~$0.0083 estimated (2 of 4 unpriced); not estimated: 1 no tokens, 1 no price" \
        in result.output
    assert f"price book {prices}" in result.output and "records no model name" in result.output
    doc = json.loads(runner.invoke(main, ["cost", "--db", sqlite_url, "--tz", "UTC", "--estimate", "--json"],
                                   env={"OMG_LEDGER_PRICES": str(prices)}).output)
    assert doc["total"]["estimated_nano_usd"] == 8_300_000 and doc["price_book"]["path"] == str(prices)
    csv_out = runner.invoke(main, ["cost", "--db", sqlite_url, "--tz", "UTC", "--estimate", "--csv", "--total",
                                   "--prices", str(prices)]).output.splitlines()
    assert csv_out[0].endswith("estimated_usd,estimated_nano_usd,estimated_invocations,unestimated_invocations")
    assert csv_out[-1].endswith(",0.0083,8300000,2,2")
    after = hashlib.sha256("\n".join(sqlite3.connect(path).iterdump()).encode()).hexdigest()
    assert before == after  # the estimate is never written into the ledger


def test_runs_and_show_estimate(sqlite_url, tmp_path, estimate_home):
    ledger(sqlite_url, estimate_home)
    prices = tmp_path / "prices.toml"
    prices.write_text(BOOK)
    runner = CliRunner()
    plain = json.loads(runner.invoke(main, ["runs", "--db", sqlite_url, "--json"]).output)
    assert not any("estimated_nano_usd" in r for r in plain)
    rows = {r["run_id"]: r for r in json.loads(runner.invoke(
        main, ["runs", "--db", sqlite_url, "--json", "--estimate", "--prices", str(prices)]).output)}
    assert (rows[A]["estimated_nano_usd"], rows[A]["estimated_invocations"]) == (SCAN_NANOS + FIX_NANOS, 2)
    assert rows[A]["cost_nano_usd"] == 0
    killed = rows["20261129-113000.000000001-1"]
    assert (killed["estimated_nano_usd"], killed["unestimated_invocations"]) == (0, 1)
    assert rows["20261129-101000.000000001-1"]["estimated_invocations"] == 0  # all priced
    # README's fields, on every row: dollars beside the exact nano-dollars, the reasons counted.
    assert rows[A]["estimated_usd"] == 0.0083 and rows["20261129-101000.000000001-1"]["estimated_usd"] == 0.0
    assert killed["unestimated_reasons"] == {"no tokens": 1, "no price": 0}
    csv_text = runner.invoke(main, ["runs", "--db", sqlite_url, "--csv", "--estimate", "--prices", str(prices)]).output
    header, *lines = csv_text.splitlines()
    assert header.endswith(",estimated_usd,estimated_nano_usd,estimated_invocations,unestimated_invocations")
    assert next(line for line in lines if line.startswith(A)).endswith(",0.0083,8300000,2,0")
    text = runner.invoke(main, ["runs", "--db", sqlite_url, "--estimate", "--prices", str(prices)]).output
    assert "~$0.0083 (2 of 2)" in text
    assert "$0.4514 known + ~$0.0083 estimated (2 of 4 unpriced)" in text

    shown = json.loads(runner.invoke(main, ["show", "--db", sqlite_url, A, "--json", "--estimate",
                                            "--prices", str(prices)]).output)
    assert [c["estimated_nano_usd"] for c in shown["charges"]] == [SCAN_NANOS, FIX_NANOS]
    assert [c["estimated_usd"] for c in shown["charges"]] == [SCAN_NANOS / 1e9, FIX_NANOS / 1e9]
    assert shown["estimated_nano_usd"] == 8_300_000 and shown["cost_nano_usd"] == 0
    slow = json.loads(runner.invoke(main, ["show", "--db", sqlite_url, "20261129-113000", "--json", "--estimate",
                                           "--prices", str(prices)]).output)
    assert [(c["estimated_nano_usd"], c["estimated_usd"], c["estimate_unavailable"]) for c in slow["charges"]] \
        == [(None, None, "no tokens")]
    text = runner.invoke(main, ["show", "--db", sqlite_url, A, "--estimate", "--prices", str(prices)]).output
    assert "estimate for its unpriced work: ~$0.0083 estimated (2 of 2 unpriced)" in text and "~$0.0031" in text


def test_unpriced_charge_rows_with_tokens_are_estimated_whatever_their_kind(sqlite_url, scenario_home):
    # Issue 12: a Codex assessment (assess_cost_unknown + usage) is to become a NULL-cost charge
    # with tokens. The estimate reads charges rows, so such a row is priced like any other: here
    # run F1's assessment row is given that shape directly in the (real) SQLite ledger.
    engine = ledger(sqlite_url, scenario_home)
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        changed = conn.execute(
            "UPDATE charges SET cost_nano_usd = NULL, cost_unknown = 1, input_tokens = 1000, cached_input_tokens = 0,"
            " output_tokens = 100, reasoning_output_tokens = 0 WHERE kind = 'assessment' AND run_pk = "
            "(SELECT id FROM runs WHERE run_id = ?)", (test_cost.F1,)).rowcount
        conn.execute("UPDATE runs SET runtime = 'codex' WHERE run_id = ?", (test_cost.F1,))
    assert changed == 1
    report = cost_report(engine, by="leg-kind", tz="UTC", now=NOW, prices=book())
    assessment = next(r for r in report["rows"] if r["key"] == "assessment")
    # 1000*1 + 100*10 = 2000 µ$ at the test book's Codex prices; F2's assessment stays known
    assert (assessment["estimated_nano_usd"], assessment["estimated_invocations"]) == (2_000_000, 1)
    assert assessment["cost_nano_usd"] == nanos("0.0078")
