"""`report --html`: the page opened in a real headless chromium. Its figures must equal
`cost --json` for the same window (and the hand-computed redone spend), it must load
with no console message at all (no script, nothing fetched), and a screenshot is taken."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from decimal import Decimal

import pytest
from click.testing import CliRunner

from omg_ledger.cli import main
from tests import test_cost
from tests.browser import DomIndex, load, measure
from tests.test_cost import ev, ledger, nanos, passed, state, t, write_run
from tests.test_estimate import BOOK

scenario_home = test_cost.scenario_home
NOW = {"OMG_LEDGER_NOW": "2026-11-29T20:00:00Z"}


def cli(*args, **env) -> str:
    result = CliRunner().invoke(main, list(args), env={**NOW, **env})
    assert result.exit_code in (0, 1), result.output
    return result.output


def usd(nanos_value: int) -> str:
    return f"${Decimal(nanos_value) / 10**9:.4f}"


def test_corpus_page_equals_cost_json_and_loads_clean(db_url, corpus_home, tmp_path):
    ledger(db_url, corpus_home, "corpus")
    prices = tmp_path / "prices.toml"
    prices.write_text(BOOK)
    page = tmp_path / "report.html"
    cli("report", "--db", db_url, "--html", str(page), "--tz", "UTC", "--estimate", "--prices", str(prices),
        "--limit", "day=1", "--limit", "month=800")
    loaded = load(page, tmp_path)
    assert loaded.console == []  # no error, no CSP violation, no log line of any kind
    assert loaded.screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and loaded.screenshot.stat().st_size > 10_000
    dom = DomIndex(loaded.dom)
    assert not dom.where("script") and not dom.where("link") and not dom.where("img")

    # The syncs the figures come from, as `homes` reports them (one home: one instant).
    [home] = json.loads(cli("homes", "--db", db_url, "--json"))
    synced = dom.by_id("synced")
    assert (synced.attrs["data-oldest"], synced.attrs["data-newest"]) == (home["last_synced_at"],) * 2
    # (--tz UTC: the stored instant to the second, its offset written out)
    assert synced.text == f"ledger synced {home['last_synced_at'][:19]}+00:00", synced.text

    base = ("--db", db_url, "--tz", "UTC", "--json", "--estimate", "--prices", str(prices))
    total = json.loads(cli("cost", *base))["total"]
    known = dom.by_id("known")
    assert int(known.attrs["data-nano-usd"]) == total["cost_nano_usd"]
    assert known.text == f"≥ {usd(total['cost_nano_usd'])} +{total['unknown_cost_invocations']} unpriced"
    assert int(dom.by_id("invocations").attrs["data-count"]) == total["invocations"]
    assert int(dom.by_id("unpriced").attrs["data-count"]) == total["unknown_cost_invocations"] == 6
    assert int(dom.by_id("estimated").attrs["data-nano-usd"]) == total["estimated_nano_usd"]
    assert dom.by_id("estimated").text.startswith(f"~{usd(total['estimated_nano_usd'])}")

    by_day = {r["key"]: r for r in json.loads(cli("cost", *base, "--by", "day"))["rows"]}
    by_runtime = {r["key"]: r for r in json.loads(cli("cost", *base, "--by", "runtime"))["rows"]}
    day_sum, runtime_sum = defaultdict(int), defaultdict(int)
    day_estimate, runtime_estimate = defaultdict(int), defaultdict(int)
    for row in dom.where("tr"):
        if "data-day" not in row.attrs:
            continue
        cells = [e for e in dom.elements if e.tag == "td" and e in _children(dom, row)]
        money = next(c for c in cells if "data-nano-usd" in c.attrs)
        estimate = next(c for c in cells if "data-estimated-nano-usd" in c.attrs)
        day_sum[row.attrs["data-day"]] += int(money.attrs["data-nano-usd"])
        runtime_sum[row.attrs["data-runtime"]] += int(money.attrs["data-nano-usd"])
        day_estimate[row.attrs["data-day"]] += int(estimate.attrs["data-estimated-nano-usd"])
        runtime_estimate[row.attrs["data-runtime"]] += int(estimate.attrs["data-estimated-nano-usd"])
    assert dict(day_sum) == {k: r["cost_nano_usd"] for k, r in by_day.items()}
    assert dict(runtime_sum) == {k: r["cost_nano_usd"] for k, r in by_runtime.items()}
    assert dict(day_estimate) == {k: r["estimated_nano_usd"] for k, r in by_day.items()}
    assert dict(runtime_estimate) == {k: r["estimated_nano_usd"] for k, r in by_runtime.items()}
    # the chart draws the same numbers: known bars and hatched estimate bars
    bars = defaultdict(int)
    for rect in dom.where("rect"):
        if "data-part" in rect.attrs:
            bars[(rect.attrs["data-day"], rect.attrs["data-part"])] += int(rect.attrs["data-nano-usd"])
    assert bars == {(k, "known"): r["cost_nano_usd"] for k, r in by_day.items()} | \
        {(k, "estimated"): r["estimated_nano_usd"] for k, r in by_day.items() if r["estimated_nano_usd"]}

    by_node = json.loads(cli("cost", *base, "--by", "node"))["rows"]
    shown_nodes = [(e.attrs["data-key"], int(_first(dom, e, "data-nano-usd")))
                   for e in dom.where("tr") if "data-key" in e.attrs and _inside(dom, e, "nodes")]
    assert shown_nodes == [(r["key"], r["cost_nano_usd"]) for r in by_node[:10]]

    runs = json.loads(cli("runs", "--db", db_url, "--json"))
    shown_status = {e.attrs["data-status"]: int(_first(dom, e, "data-count")) for e in dom.where("tr")
                    if "data-status" in e.attrs}
    assert shown_status == dict(Counter(r["status"] for r in runs))
    assert len(dom.by_id("abandoned").text.strip()) and "ABANDONED" not in dom.by_id("paused").text
    # the breach is the first thing on the page
    body_text = [e for e in dom.elements if e.tag == "p"]
    assert body_text[0].attrs.get("class") == "breach" and body_text[0].text.startswith("LIMIT EXCEEDED: day: ")


def _children(dom: DomIndex, parent) -> list:
    """Elements after `parent` up to the next sibling row (the index is in document order)."""
    start = dom.elements.index(parent)
    out = []
    for element in dom.elements[start + 1:]:
        if element.tag == "tr":
            break
        out.append(element)
    return out


def _first(dom: DomIndex, row, attr: str) -> str:
    return next(e.attrs[attr] for e in _children(dom, row) if attr in e.attrs)


def _inside(dom: DomIndex, row, table_id: str) -> bool:
    index = dom.elements.index(row)
    tables = [e for e in dom.elements[:index] if e.tag == "table"]
    return bool(tables) and tables[-1].attrs.get("id") == table_id


def test_window_redone_work_and_hostile_text(db_url, scenario_home, tmp_path):
    hostile = "20261129-120000.000000001-1"
    name = '<script>alert("x")</script>&amp;'
    write_run(scenario_home, hostile, [
        ev(hostile, t("12:00:00"), "run_started"),
        ev(hostile, t("12:00:01"), "node_started", node_id="<b>n</b>"),
        passed(hostile, t("12:00:02"), "<b>n</b>", 0.5, provenance="exit-only"),
        ev(hostile, t("12:00:03"), "run_finished", outcome="passed"),
    ], state(hostile, name, {"<b>n</b>": {"verdict": "PASS", "cost_usd": 0.5}}))
    ledger(db_url, scenario_home)
    page = tmp_path / "day.html"
    window = ("--since", "2026-11-29T00:00:00Z", "--until", "2026-11-30T00:00:00Z", "--tz", "UTC")
    cli("report", "--db", db_url, "--html", str(page), *window)
    loaded = load(page, tmp_path)
    assert loaded.console == []
    dom = DomIndex(loaded.dom)
    assert not dom.where("script") and not dom.where("b")  # run text is shown, never interpreted
    assert name in dom.by_id("graphs").text and "<b>n</b>" in dom.by_id("nodes").text  # as text, verbatim

    # By hand: the cost scenario on 2026-11-29 ($0.4214, tests/test_limits.py) + the $0.50 run.
    total = json.loads(cli("cost", "--db", db_url, "--json", *window))["total"]
    assert total["cost_nano_usd"] == nanos("0.9214")
    assert int(dom.by_id("known").attrs["data-nano-usd"]) == nanos("0.9214")
    assert dom.by_id("window").text == "2026-11-29T00:00:00+00:00 → 2026-11-30T00:00:00+00:00"
    # Redone, by hand: run B's impl round 0 ($0.04) and review's non-final judgment ($0.02) were
    # re-run in the same leg (feedback); run C's compile FAIL ($0.03, leg 1) ran again in leg 2.
    redone = {e.attrs["data-key"]: (int(_first(dom, e, "data-nano-usd")), int(_first(dom, e, "data-count")))
              for e in dom.where("tr") if _inside(dom, e, "redone") and "data-key" in e.attrs}
    assert redone == {"feedback": (nanos("0.06"), 2), "retry": (nanos("0.03"), 1)}
    assert "estimate" not in dom.by_id("known").text and not [e for e in dom.elements if e.attrs.get("id") ==
                                                                "estimated"]


# The corpus runs' first and last event (UTC, 2026-11-29) and live status, from its files:
# s10 (PASS) runs 18:15:14.935 → 18:15:16.518, s22 (ABANDONED) 18:15:20.323 → 18:15:20.348.
@pytest.mark.parametrize("window, expected", [
    # until alone: the six runs whose first event is before 18:15:18 (s01 … s10)
    (("--until", "2026-11-29T18:15:18Z"), {"PASS": 3, "FAIL": 3}),
    # s10 has an event after since, s22 one before until (both in); s09 ends before since,
    # s24 starts after until (both out): s10 s12 s14 s15 s16 s18 s20 s22
    (("--since", "2026-11-29T18:15:16Z", "--until", "2026-11-29T18:15:20.33Z"),
     {"PASS": 6, "PAUSED": 1, "ABANDONED": 1}),
], ids=["until-only", "since-and-until"])
def test_status_counts_cover_the_page_window(db_url, corpus_home, tmp_path, window, expected):
    ledger(db_url, corpus_home, "corpus")
    page = tmp_path / "window.html"
    cli("report", "--db", db_url, "--html", str(page), "--tz", "UTC", *window)
    dom = DomIndex(page.read_text())
    shown = {e.attrs["data-status"]: int(_first(dom, e, "data-count")) for e in dom.where("tr")
             if "data-status" in e.attrs}
    assert shown == expected


# The attempts paid for but recorded nowhere (corpus README, per-run.md): s05's first try
# (a plain retry), s16's session-limited call (no terminal), s22's killed call (ABANDONED);
# after 18:15:20.33 also s38's first try and s41's (none of them in these windows).
@pytest.mark.parametrize("window, expected", [
    (("--until", "2026-11-29T18:15:18Z"), 1),  # s05
    (("--since", "2026-11-29T18:15:16Z", "--until", "2026-11-29T18:15:20.33Z"), 2),  # s16, s22
], ids=["until-only", "since-and-until"])
def test_unrecorded_attempts_cover_the_page_window(db_url, corpus_home, tmp_path, window, expected):
    ledger(db_url, corpus_home, "corpus")
    page = tmp_path / "window.html"
    cli("report", "--db", db_url, "--html", str(page), "--tz", "UTC", *window)
    assert int(DomIndex(page.read_text()).by_id("unrecorded").attrs["data-count"]) == expected


def test_bidi_and_control_characters_in_run_text_are_visible_escapes(sqlite_url, tmp_path):
    """An unterminated U+202E in a graph name would turn the rest of its line around (the
    resume command, the orphan warning); a C0 control makes the page invalid HTML. Both are
    shown as escapes, as on the terminal."""
    home = tmp_path / "home"
    run_id = "20261129-120000.000000001-1"
    name = "deploy\u202e esc\x1b[31m\x07"
    write_run(home, run_id, [
        ev(run_id, t("12:00:00"), "run_started"),
        ev(run_id, t("12:00:01"), "node_started", node_id="n\u2066"),
        passed(run_id, t("12:00:02"), "n\u2066", 0.5, provenance="exit-only"),
        ev(run_id, t("12:00:03"), "run_finished", outcome="passed"),
    ], state(run_id, name, {"n\u2066": {"verdict": "PASS", "cost_usd": 0.5}}))
    ledger(sqlite_url, home)
    page = tmp_path / "page.html"
    cli("report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC")
    text = page.read_text(encoding="utf-8")
    for raw in ("\u202e", "\u2066", "\x1b", "\x07"):
        assert raw not in text, repr(raw)
    assert "deploy\\u202e esc\\x1b[31m\\x07" in text and "n\\u2066" in text
    loaded = load(page, tmp_path)
    assert loaded.console == []
    assert "deploy\\u202e" in DomIndex(loaded.dom).by_id("graphs").text


def test_console_check_catches_a_broken_page(tmp_path):
    # The detector itself can fail: a page with a script error and a blocked fetch.
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" "
                    "content=\"default-src 'none'\"></head><body><img src=\"http://example.invalid/x.png\">"
                    "<p>x</p></body></html>")
    assert load(page, tmp_path).console  # the CSP violation is reported


def test_bad_html_target_is_a_clear_error(sqlite_url, tmp_path):
    assert CliRunner().invoke(main, ["db", "upgrade", "--db", sqlite_url]).exit_code == 0
    result = CliRunner().invoke(main, ["report", "--db", sqlite_url, "--html", str(tmp_path / "no" / "r.html")])
    assert result.exit_code == 2 and "cannot write" in result.output and "Traceback" not in result.output


def test_the_page_says_which_syncs_its_figures_come_from(db_url, tmp_path):
    import re

    for n, label in enumerate(("here", "there", "idle")):
        run_id = f"20261129-090000.00000000{n}-1"
        write_run(tmp_path / label, run_id, [ev(run_id, t("09:00:00"), "run_started")])
        engine = ledger(db_url, tmp_path / label, label)

    def synced_span() -> str:
        page = tmp_path / "r.html"
        cli("report", "--db", db_url, "--html", str(page), "--tz", "Asia/Tokyo")
        return re.search(r'<span id="synced"[^>]*>[^<]*</span>', page.read_text()).group(0)

    def set_synced(label: str, instant: str | None) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql(f"UPDATE homes SET last_synced_at = {'NULL' if instant is None else repr(instant)} "
                                 f"WHERE label = '{label}'")

    for label in ("here", "there", "idle"):
        set_synced(label, "2026-11-29T12:00:00.000000Z")
    # Shown in --tz (Tokyo is UTC+9, no DST), the stored UTC instants in the attributes.
    assert synced_span().endswith(">ledger synced 2026-11-29T21:00:00+09:00</span>")
    set_synced("there", "2026-11-28T07:30:00.000000Z")
    set_synced("idle", None)
    assert synced_span() == ('<span id="synced" data-oldest="2026-11-28T07:30:00.000000Z" '
                             'data-newest="2026-11-29T12:00:00.000000Z">homes synced 2026-11-28T16:30:00+09:00 '
                             'to 2026-11-29T21:00:00+09:00 (1 home(s) never)</span>')
    for label in ("here", "there"):
        set_synced(label, None)
    assert synced_span() == '<span id="synced">no sync completed yet</span>'


def _rows(dom: DomIndex, table_id: str) -> list[tuple[dict, list[str]]]:
    """(attributes, cell texts) of each row of table `table_id` that has cells."""
    rows = [(row.attrs, [e.text for e in _children(dom, row) if e.tag == "td"])
            for row in dom.where("tr") if _inside(dom, row, table_id)]
    return [(attrs, cells) for attrs, cells in rows if cells]


def test_work_with_no_known_price_reads_unknown_as_cost_shows_it(sqlite_url, corpus_home, tmp_path):
    """The corpus's codex runs (auto-codex, s18-codex) have 6 invocations, none priced:
    `cost --by runtime` says "unknown (6 unpriced)", never a $0.0000 lower bound, and so
    does the page, in every table that has the row (the exact 0 stays in the attribute)."""
    ledger(sqlite_url, corpus_home, "corpus")
    page = tmp_path / "report.html"
    cli("report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC")
    dom = DomIndex(page.read_text(encoding="utf-8"))
    [(attrs, cells)] = [row for row in _rows(dom, "runtimes") if row[0]["data-key"] == "codex"]
    assert cells[1:3] == ["unknown (6 unpriced)", "6"]
    [(attrs, cells)] = [row for row in _rows(dom, "spend-by-day") if row[0]["data-runtime"] == "codex"]
    assert cells == ["2026-11-29", "codex", "unknown (6 unpriced)", "6"]
    assert all("$0.0000 +" not in cells[2] for _attrs, cells in _rows(dom, "spend-by-day"))


def _undated_home(tmp_path):
    """A run with state.json and assess.json but no stream: its assessment charge ($0.50)
    has no time. And one run charged $0.25 at 2026-11-29T09:10Z."""
    from tests.test_cost import one_charge_run

    home = tmp_path / "home"
    run = "20261129-090000.000000001-1"
    write_run(home, run, None, state(run, "g", {}), assess={"goal_met": True, "assess_cost_usd": 0.5})
    one_charge_run(home, "20261129-091000.000000001-1", "2026-11-29T09:10:00.000000Z", 0.25)
    return home


def test_the_chart_names_the_undated_spend_in_full(sqlite_url, tmp_path):
    """A run with state.json and assess.json but no stream: its assessment charge ($0.50)
    has no time, so all time shows it as its own "(undated)" day beside 2026-11-29's $0.25
    (as `cost --by day` does); the chart's axis names both days, the undated one whole."""
    ledger(sqlite_url, _undated_home(tmp_path))
    page = tmp_path / "report.html"
    cli("report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC")
    dom = DomIndex(page.read_text(encoding="utf-8"))
    bars = {r.attrs["data-day"]: int(r.attrs["data-nano-usd"]) for r in dom.where("rect") if "data-day" in r.attrs}
    assert bars == {"2026-11-29": nanos("0.25"), "(undated)": nanos("0.5")}
    axis = [e.text for e in dom.where("text", font_size="10")]
    assert axis == ["11-29", "(undated)"]


def test_a_window_says_how_much_undated_spend_it_leaves_out(sqlite_url, tmp_path):
    """The run above with no stream ($0.50, undated) is in no window: a page for
    2026-11-29 totals the $0.25 charged that day and says the $0.50 it leaves out, as
    `cost` says it under its total; the all-time page holds it and says nothing."""
    ledger(sqlite_url, _undated_home(tmp_path))
    page = tmp_path / "report.html"
    cli("report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC",
        "--since", "2026-11-29", "--until", "2026-11-30")
    dom = DomIndex(page.read_text(encoding="utf-8"))
    assert int(dom.by_id("known").attrs["data-nano-usd"]) == nanos("0.25")
    undated = dom.by_id("undated")
    assert (int(undated.attrs["data-nano-usd"]), int(undated.attrs["data-count"])) == (nanos("0.5"), 1)
    assert undated.text.startswith("not in any window: $0.5000 in 1 undated charge ")
    cli("report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC")
    dom = DomIndex(page.read_text(encoding="utf-8"))
    assert int(dom.by_id("known").attrs["data-nano-usd"]) == nanos("0.75")
    assert not [e for e in dom.elements if e.attrs.get("id") == "undated"]


def test_the_limits_section_says_what_limits_says(sqlite_url, corpus_home, tmp_path):
    """As the `limits` table (README): the corpus's codex work has $0 known spend, 6
    unpriced invocations and ~$0.1703 estimated with the shipped book (tests/test_estimate.py),
    so runtime:codex/week=0.10 is exceeded with the estimate only, never read as known spend
    over it; day=5 is not ($1.7167 known, 6 unpriced); a limit on a graph nothing was ever
    charged to reads $0 and is said."""
    from tests.test_estimate import SHIPPED

    ledger(sqlite_url, corpus_home, "corpus")
    page = tmp_path / "report.html"
    cli("report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC", "--estimate", "--prices", str(SHIPPED),
        "--limit", "runtime:codex/week=0.10", "--limit", "graph:nosuch/day=1", "--limit", "day=5")
    dom = DomIndex(page.read_text(encoding="utf-8"))
    rows = {attrs["data-limit"]: cells for attrs, cells in _rows(dom, "limits")}
    assert rows == {
        "runtime:codex/week": ["runtime:codex/week", "2026-11-23 (week)", "$0.0000", "6", "~$0.1703", "$0.1000",
                               "EXCEEDED with estimate"],
        "graph:nosuch/day": ["graph:nosuch/day", "2026-11-29 (day)", "$0.0000", "0", "~$0.0000", "$1.0000", "ok"],
        "day": ["day", "2026-11-29 (day)", "$1.7167", "6", "~$0.1703", "$5.0000", "ok"],
    }
    notes = [e.text for e in dom.where("p", **{"class": "muted"})]
    assert "limit graph:nosuch/day: no graph 'nosuch' was ever charged in this ledger, so it reads $0 until one " \
           "is (`omg-ledger cost --by graph` lists the names)" in notes


def test_the_limits_section_says_the_spend_no_period_holds(sqlite_url, tmp_path):
    ledger(sqlite_url, _undated_home(tmp_path))
    page = tmp_path / "report.html"
    cli("report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC", "--limit", "day=1")
    dom = DomIndex(page.read_text(encoding="utf-8"))
    assert [cells[2] for _attrs, cells in _rows(dom, "limits")] == ["$0.2500"]  # the undated $0.50 in no day
    notes = [e.text for e in dom.where("p", **{"class": "muted"})]
    assert any(n.startswith("not in any period, so in no limit: $0.5000 in 1 undated charge ") for n in notes)


def test_the_charts_scale_reads_small_spend(sqlite_url, tmp_path):
    """Days of $0.003 and $0.001: the top of the scale is the larger day, $0.0030 at the
    page's four decimals (in cents it read $0.00 above a full-height bar)."""
    from tests.test_cost import one_charge_run

    home = tmp_path / "home"
    one_charge_run(home, "20261128-091000.000000001-1", "2026-11-28T09:10:00.000000Z", 0.003)
    one_charge_run(home, "20261129-091000.000000001-1", "2026-11-29T09:10:00.000000Z", 0.001)
    ledger(sqlite_url, home)
    page = tmp_path / "report.html"
    cli("report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC")
    scale = [e.text for e in DomIndex(page.read_text(encoding="utf-8")).where("text", font_size="11")]
    assert scale == ["$0.0030", "$0"]


def test_a_long_name_never_pushes_the_figures_off_the_page(sqlite_url, tmp_path):
    """A graph named by one 400-character word: laid out in a 1200-pixel window, its row's
    figures and every other row's stay in the window (they were pushed some 2,000 pixels
    right, off every row of the graph and node tables), and the page does not scroll sideways."""
    from tests.test_cost import one_charge_run

    home = tmp_path / "home"
    one_charge_run(home, "20261128-091000.000000001-1", "2026-11-28T09:10:00.000000Z", 1.5, graph="g" * 400)
    one_charge_run(home, "20261129-091000.000000001-1", "2026-11-29T09:10:00.000000Z", 0.25, graph="short")
    ledger(sqlite_url, home)
    page = tmp_path / "report.html"
    cli("report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC")
    rights = measure(page, tmp_path, "[...document.querySelectorAll('#graphs td.n, #nodes td.n')]"
                                     ".map(e => e.getBoundingClientRect().right).join(' ')")
    assert len(rights.split()) == 8  # 2 rows x (spend, invocations), in 2 tables
    assert all(float(right) <= 1200 for right in rights.split()), rights
    assert measure(page, tmp_path, "document.documentElement.scrollWidth <= window.innerWidth") == "true"


@pytest.mark.parametrize("unpriced, shown", [(0, "0 (0%)"), (1, "1 (<1%)"), (100, "100 (50%)"), (200, "200 (>99%)"),
                                             (201, "201 (100%)")])
def test_the_unpriced_share_never_reads_as_none_or_all_when_it_is_neither(sqlite_url, tmp_path, unpriced, shown):
    """201 invocations, `unpriced` of them with no price: 1 of 201 is 0.5% and 200 of 201
    is 99.5%, which whole percents would show as 0% and 100%."""
    home = tmp_path / "home"
    run_id = "20261129-120000.000000001-1"
    events = [ev(run_id, t("12:00:00"), "run_started")]
    for n in range(201):
        node = f"n{n}"
        events.append(ev(run_id, t("12:00:01"), "node_started", node_id=node))
        if n < unpriced:
            events.append(ev(run_id, t("12:00:02"), "node_passed", node_id=node, verdict="PASS", cost_unknown=True,
                             provenance="exit-only"))
        else:
            events.append(passed(run_id, t("12:00:02"), node, 0.01, provenance="exit-only"))
    write_run(home, run_id, events)
    ledger(sqlite_url, home)
    page = tmp_path / "report.html"
    cli("report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC")
    dom = DomIndex(page.read_text(encoding="utf-8"))
    assert int(dom.by_id("invocations").attrs["data-count"]) == 201
    assert dom.by_id("unpriced").text == shown


def test_a_hand_edited_sync_time_is_shown_as_stored(sqlite_url, tmp_path):
    """homes.last_synced_at edited by hand to text that is no time: the page is written
    (exit 0, no traceback) and shows the value as stored, as `homes` does."""
    import sqlite3

    run_id = "20261129-090000.000000001-1"
    write_run(tmp_path / "home", run_id, [ev(run_id, t("09:00:00"), "run_started")])
    ledger(sqlite_url, tmp_path / "home")
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE homes SET last_synced_at = 'yesterday <b>ish</b>'")
    page = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", "--db", sqlite_url, "--html", str(page), "--tz", "UTC"], env=NOW)
    assert result.exit_code == 0, result.output
    assert DomIndex(page.read_text(encoding="utf-8")).by_id("synced").text == "ledger synced yesterday <b>ish</b>"
