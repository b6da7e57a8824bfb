"""`omg-ledger metrics`: parsed with prometheus_client's own parser (what a scraper does)
and checked against `cost --json` and `runs --json` for the same ledger."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict

from click.testing import CliRunner
from prometheus_client.parser import text_fd_to_metric_families, text_string_to_metric_families

from omg_ledger.cli import main
from omg_ledger.status import STATUSES
from tests.test_cost import ev, ledger, passed, state, t, write_run

FAMILIES = {"omg_ledger_known_spend_usd", "omg_ledger_invocations", "omg_ledger_unpriced_invocations",
            "omg_ledger_runs", "omg_ledger_abandoned_runs", "omg_ledger_open_problems",
            "omg_ledger_last_event_timestamp_seconds", "omg_ledger_last_sync_timestamp_seconds"}


def invoke(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def parse(text: str) -> dict:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert all(f.type == "gauge" for f in families.values())
    return families


def by_labels(family, *names) -> dict:
    return {tuple(s.labels[n] for n in names): s.value for s in family.samples}


def test_metrics_equal_cost_and_runs_json(db_url, corpus_home):
    ledger(db_url, corpus_home, "corpus")
    families = parse(invoke("metrics", "--db", db_url))
    assert set(families) == FAMILIES

    spend = by_labels(families["omg_ledger_known_spend_usd"], "runtime", "graph")
    calls = by_labels(families["omg_ledger_invocations"], "runtime", "graph")
    unpriced = by_labels(families["omg_ledger_unpriced_invocations"], "runtime", "graph")
    per_runtime: dict[str, list] = defaultdict(lambda: [0, 0, 0])
    per_graph: dict[str, list] = defaultdict(lambda: [0, 0, 0])
    for (runtime, graph), usd in spend.items():
        nanos = round(usd * 1e9)  # the text holds at most 9 decimals
        for into in (per_runtime[runtime], per_graph[graph]):
            into[0] += nanos
            into[1] += int(calls[(runtime, graph)])
            into[2] += int(unpriced[(runtime, graph)])

    cost_runtime = json.loads(invoke("cost", "--db", db_url, "--by", "runtime", "--json"))
    assert dict(per_runtime) == {r["key"]: [r["cost_nano_usd"], r["invocations"], r["unknown_cost_invocations"]]
                                 for r in cost_runtime["rows"]}
    cost_node = json.loads(invoke("cost", "--db", db_url, "--by", "node", "--json"))
    expected_graph: dict[str, list] = defaultdict(lambda: [0, 0, 0])
    for r in cost_node["rows"]:
        into = expected_graph[r["graph"] if r["graph"] is not None else "(no graph)"]
        into[0] += r["cost_nano_usd"]
        into[1] += r["invocations"]
        into[2] += r["unknown_cost_invocations"]
    assert dict(per_graph) == dict(expected_graph)
    total = cost_runtime["total"]
    assert sum(v[0] for v in per_graph.values()) == total["cost_nano_usd"]
    assert sum(v[2] for v in per_graph.values()) == total["unknown_cost_invocations"] == 6  # the corpus' Codex calls

    runs = json.loads(invoke("runs", "--db", db_url, "--json"))
    statuses = Counter(r["status"] for r in runs)
    assert by_labels(families["omg_ledger_runs"], "status") == {(s,): float(statuses.get(s, 0)) for s in STATUSES}
    assert families["omg_ledger_abandoned_runs"].samples[0].value == statuses["ABANDONED"] == 2
    assert families["omg_ledger_open_problems"].samples[0].value == 0
    newest = max(r["last_event_at"] for r in runs)  # 2026-11-29T18:15:24.901354Z (s41's last line)
    assert newest == "2026-11-29T18:15:24.901354Z"
    assert families["omg_ledger_last_event_timestamp_seconds"].samples[0].value == 1795976124.901354


def _one_passed_run(home, run_id: str, graph_name: str, hour: str = "10") -> None:
    """A run of one node that passed for $0.25, at ``hour`` o'clock, in a graph named ``graph_name``."""
    write_run(home, run_id, [
        ev(run_id, t(f"{hour}:00:00"), "run_started"),
        ev(run_id, t(f"{hour}:00:01"), "node_started", node_id="n"),
        passed(run_id, t(f"{hour}:00:02"), "n", 0.25, provenance="exit-only"),
        ev(run_id, t(f"{hour}:00:03"), "run_finished", outcome="passed"),
    ], state(run_id, graph_name, {"n": {"verdict": "PASS", "cost_usd": 0.25}}))


def test_label_values_are_escaped(sqlite_url, tmp_path):
    home = tmp_path / "home"
    weird = 'we"ird\\graph\nline two'
    run_id = "20261129-100000.000000001-1"
    _one_passed_run(home, run_id, weird)
    ledger(sqlite_url, home)
    families = parse(invoke("metrics", "--db", sqlite_url))
    assert by_labels(families["omg_ledger_known_spend_usd"], "runtime", "graph") == {("claude", weird): 0.25}


def test_empty_ledger(sqlite_url):
    invoke("db", "upgrade", "--db", sqlite_url)  # a ledger with nothing in it (reads never create one)
    families = parse(invoke("metrics", "--db", sqlite_url))
    assert "omg_ledger_last_event_timestamp_seconds" not in families
    assert families["omg_ledger_known_spend_usd"].samples == []
    assert {s.value for s in families["omg_ledger_runs"].samples} == {0.0}


def test_output_file_is_replaced_atomically(sqlite_url, corpus_home, tmp_path):
    ledger(sqlite_url, corpus_home, "corpus")
    target = tmp_path / "collector" / "omg.prom"
    target.parent.mkdir()
    target.write_text("old contents\n")
    old_inode = target.stat().st_ino
    assert invoke("metrics", "--db", sqlite_url, "--output", str(target)) == ""  # nothing on stdout
    text = target.read_text()
    assert text == invoke("metrics", "--db", sqlite_url)
    assert target.stat().st_ino != old_inode  # a new file renamed over the old one, never rewritten in place
    assert os.listdir(target.parent) == ["omg.prom"]  # no temporary file left behind
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_missing_output_directory_is_a_clear_error(sqlite_url, tmp_path):
    invoke("db", "upgrade", "--db", sqlite_url)
    result = CliRunner().invoke(main, ["metrics", "--db", sqlite_url, "--output", str(tmp_path / "no" / "x.prom")])
    assert result.exit_code == 2 and "cannot write" in result.output and "Traceback" not in result.output


def test_last_sync_time_per_home(sqlite_url, corpus_home, tmp_path):
    import time

    before = time.time()
    invoke("sync", "--db", sqlite_url, "--home", f"corpus={corpus_home}")
    after = time.time()
    families = parse(invoke("metrics", "--db", sqlite_url))
    (sample,) = families["omg_ledger_last_sync_timestamp_seconds"].samples
    assert sample.labels == {"home": "corpus"}
    assert before <= sample.value <= after


def test_a_hand_edited_sync_time_gives_no_sample_for_its_home(sqlite_url, corpus_home, tmp_path):
    """homes.last_synced_at edited by hand to what is no time: the scrape still works (it
    stopped with a traceback), that home has no last-sync sample, the other home keeps its."""
    import sqlite3

    invoke("sync", "--db", sqlite_url, "--home", f"corpus={corpus_home}")
    other = tmp_path / "other"
    other.mkdir()
    invoke("sync", "--db", sqlite_url, "--home", f"other={other}")
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE homes SET last_synced_at = 'yesterday-ish' WHERE label = 'corpus'")
    families = parse(invoke("metrics", "--db", sqlite_url))
    assert [s.labels for s in families["omg_ledger_last_sync_timestamp_seconds"].samples] == [{"home": "other"}]


def test_output_into_a_fifo_is_written_into_it_not_replaced(sqlite_url, corpus_home, tmp_path):
    """--output /dev/stdout, /dev/null or a FIFO: renaming a file over it put a regular
    file in the node's place (run as root, /dev/null itself was replaced)."""
    import stat

    ledger(sqlite_url, corpus_home, "corpus")
    expected = invoke("metrics", "--db", sqlite_url)
    assert len(expected.encode()) < 65536  # fits the pipe's buffer: the writer never waits for this reader
    fifo = tmp_path / "collector" / "omg.prom"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there: the writer's open does not block
    try:
        assert invoke("metrics", "--db", sqlite_url, "--output", str(fifo)) == ""
        assert stat.S_ISFIFO(os.stat(fifo).st_mode)
        received = b""
        while chunk := os.read(reader, 65536):
            received += chunk
    finally:
        os.close(reader)
    assert received.decode() == expected
    assert os.listdir(fifo.parent) == ["omg.prom"]


def test_output_through_a_symlink_replaces_the_file_it_names(sqlite_url, corpus_home, tmp_path):
    ledger(sqlite_url, corpus_home, "corpus")
    real = tmp_path / "real" / "omg.prom"
    real.parent.mkdir()
    real.write_text("old contents\n")
    link = tmp_path / "collector" / "omg.prom"
    link.parent.mkdir()
    link.symlink_to(real)
    assert invoke("metrics", "--db", sqlite_url, "--output", str(link)) == ""
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == invoke("metrics", "--db", sqlite_url)
    assert os.listdir(real.parent) == ["omg.prom"] and os.listdir(link.parent) == ["omg.prom"]


def test_stdout_is_utf_8_whatever_the_locale_says(sqlite_url, tmp_path):
    """The exposition format is UTF-8. In a Latin-1 locale `metrics > omg.prom` wrote
    graph="caf\\xe9": invalid UTF-8, so node_exporter refused the whole file."""
    import subprocess
    import sys

    home = tmp_path / "home"
    run_id = "20261129-100000.000000001-1"
    _one_passed_run(home, run_id, "café")
    ledger(sqlite_url, home)
    target = tmp_path / "omg.prom"
    invoke("metrics", "--db", sqlite_url, "--output", str(target))
    result = subprocess.run([sys.executable, "-m", "omg_ledger.cli", "metrics", "--db", sqlite_url],
                            capture_output=True, timeout=120, env={**os.environ, "PYTHONIOENCODING": "latin-1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout == target.read_bytes()
    families = parse(result.stdout.decode("utf-8"))
    assert by_labels(families["omg_ledger_known_spend_usd"], "runtime", "graph") == {("claude", "café"): 0.25}


def test_control_and_bidi_characters_in_labels_are_visible_escapes(sqlite_url, tmp_path):
    """A graph name is run text (an `auto` run's planner writes it): written raw, its ESC
    drove the terminal of whoever ran `omg-ledger metrics`, and its CR split the sample's
    line for a reader that opens the file as text (Python's open()), which then refused it.
    Such characters become the escapes every table shows (render.inert); a line feed, a
    quote and a backslash stay the format's own escapes. Two names that show alike (a BEL,
    and a backslash, x, 0, 7 typed out) are one series: two samples of one label set would
    make a scrape refuse the whole file."""
    home = tmp_path / "home"
    names = {"20261129-100000.000000001-1": 'deploy\x1b]0;owned\x07\r\u202e\u2028"\\\nend',
             "20261129-110000.000000001-1": "bell\x07", "20261129-120000.000000001-1": "bell\\x07"}
    for run_id, name in names.items():
        _one_passed_run(home, run_id, name, hour=run_id[9:11])
    ledger(sqlite_url, home)
    text = invoke("metrics", "--db", sqlite_url)
    assert not any(c in text for c in "\x1b\x07\r\u202e\u2028")
    target = tmp_path / "omg.prom"
    invoke("metrics", "--db", sqlite_url, "--output", str(target))
    with open(target, encoding="utf-8") as handle:  # universal newlines, as a Python reader opens it
        families = {f.name: f for f in text_fd_to_metric_families(handle)}
    shown = 'deploy\\x1b]0;owned\\x07\\x0d\\u202e\\u2028"\\\nend'
    assert by_labels(families["omg_ledger_known_spend_usd"], "runtime", "graph") == {
        ("claude", shown): 0.25, ("claude", "bell\\x07"): 0.5}
    assert by_labels(families["omg_ledger_invocations"], "runtime", "graph") == {
        ("claude", shown): 1, ("claude", "bell\\x07"): 2}
