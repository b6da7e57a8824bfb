"""Every money report against one independent reading of the run files.

The expectation is computed here from the files on disk by the contract and README's
billing rules, never from the ledger: one charge per line carrying accounting
(`cost_usd` or `cost_unknown` on a node terminal, a node_retried, a run_started or a
run_finished) at that line's `ts`, plus `assess.json`'s call at the run's last event.
Every report (`cost` in every grouping and zone, `runs`, `show`, `metrics`, the HTML
report's figures, the `v_*` views, a saved query) must agree with it and with each
other, over both real corpora (330 runs), also when the homes hold copies of the same
runs (whole, cut mid-run, without their stream) that must be billed once.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tarfile
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text

from omg_ledger.db import open_ledger
from omg_ledger.reports import metrics
from omg_ledger.reports.cost import GROUPINGS, cost_report
from omg_ledger.reports.overview import overview
from omg_ledger.reports.runs import list_runs, show_run
from omg_ledger.reports.sql import run_saved
from omg_ledger.sync import Home, sync

from .builders import age_tree, epoch_us, nanos, write_run
from .conftest import CORPUS

SCALE = CORPUS.parent / "corpus-scale" / "home.tar.gz"
ACCOUNTED = {"node_passed", "node_failed", "node_retried", "run_started", "run_finished"}
TOKENS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
MEASURES = ("cost_nano_usd", "invocations", "unknown_cost_invocations", *TOKENS)


@dataclass(frozen=True)
class Charge:
    run_id: str
    node_id: str | None
    at_us: int | None
    nanos: int | None  # None: unknown
    tokens: tuple[int, int, int, int]
    runtime: str
    graph: str | None
    goal: str | None


def _tokens(usage: dict | None) -> tuple[int, int, int, int]:
    usage = usage or {}
    return tuple(int(usage.get(name) or 0) for name in TOKENS)  # type: ignore[return-value]


def charges_on_disk(home: Path) -> list[Charge]:
    """The charges of every run directory under ``home``, read from its files."""
    return [charge for run_dir in sorted((home / "runs").iterdir()) for charge in _run_charges(run_dir)]


def _run_charges(run_dir: Path) -> list[Charge]:
    stream = run_dir / "events.jsonl"
    lines = [json.loads(line) for line in stream.read_bytes().splitlines() if line.strip()] if stream.exists() else []
    snapshot = json.loads((run_dir / "state.json").read_text()) if (run_dir / "state.json").exists() else None
    runtime = (snapshot.get("runtime") or "claude") if snapshot is not None else "(no snapshot)"
    graph = (snapshot.get("graph") or {}).get("name") if snapshot is not None else None
    goal = ((snapshot or {}).get("goal") or {}).get("first_run_id")
    paid = [(line.get("node_id"), epoch_us(line["ts"]), line.get("cost_unknown"), line.get("cost_usd"), line.get("usage"))
            for line in lines if line["event"] in ACCOUNTED and ("cost_usd" in line or line.get("cost_unknown"))]
    if (run_dir / "assess.json").exists():
        assess = json.loads((run_dir / "assess.json").read_text())
        paid.append((None, epoch_us(lines[-1]["ts"]) if lines else None, assess.get("assess_cost_unknown"),
                     assess.get("assess_cost_usd"), assess.get("usage")))
    return [Charge(run_dir.name, node_id, at_us, None if unknown else nanos(usd or 0), _tokens(usage), runtime,
                   graph, goal) for node_id, at_us, unknown, usd, usage in paid]


def sums(charges) -> list[int]:
    charges = list(charges)
    return [sum(c.nanos or 0 for c in charges), len(charges), sum(c.nanos is None for c in charges),
            *(sum(c.tokens[i] for c in charges) for i in range(4))]


def grouped(charges, key) -> dict:
    groups = defaultdict(list)
    for c in charges:
        groups[key(c)].append(c)
    return {k: sums(v) for k, v in groups.items()}


def measures(row: dict) -> list[int]:
    return [row[name] for name in MEASURES]


def report_rows(report: dict, key=lambda row: row["key"]) -> dict:
    rows = {}
    for row in report["rows"]:
        assert key(row) not in rows, key(row)
        rows[key(row)] = measures(row)
    # The TOTAL is the sum of the rows, measure by measure.
    assert [sum(column) for column in zip(*rows.values(), strict=True)] == measures(report["total"])
    return rows


def local_period(at_us: int, by: str, zone: ZoneInfo) -> str:
    day = (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=at_us)).astimezone(zone).date()
    if by == "month":
        return day.strftime("%Y-%m")
    if by == "week":
        day -= timedelta(days=day.weekday())
    return day.isoformat()


@pytest.fixture(scope="module")
def homes(tmp_path_factory) -> dict[str, Path]:
    """The 25-run corpus and the 305-run scale corpus, as two homes."""
    if not SCALE.exists():
        pytest.fail(f"the scale corpus is missing at {SCALE}")
    root = tmp_path_factory.mktemp("money")
    scale = root / "scale"
    with tarfile.open(SCALE) as archive:
        archive.extractall(scale, filter="data")
    return {"corpus": CORPUS / "home", "scale": scale}


def _check_every_report(engine, truth: list[Charge], homes_of: dict[str, str]) -> None:
    """Every report of ``engine`` against ``truth``; ``homes_of``: run id → the label of
    the home its spend is billed to."""
    total = sums(truth)
    by_run = grouped(truth, lambda c: c.run_id)
    keys = {
        "run": lambda c: c.run_id,
        "runtime": lambda c: c.runtime,
        "graph": lambda c: c.graph if c.graph is not None else "(no graph)",
        "goal": lambda c: c.goal or "(no goal)",
        "home": lambda c: homes_of[c.run_id],
        "node": lambda c: f"{c.graph or '(no graph)'}/{c.node_id}" if c.node_id is not None else None,
    }
    for by in (None, *GROUPINGS):
        report = cost_report(engine, by=by, tz="UTC")
        assert measures(report["total"]) == total, by
        if by is None:
            continue
        rows = report_rows(report)
        if by in keys and by != "node":
            assert rows == grouped(truth, keys[by]), by
        elif by == "node":  # node rows; run-level charges are keyed by their kind, not checked here
            nodes = {k: v for k, v in rows.items() if not k.endswith(")")}
            assert nodes == {k: v for k, v in grouped(truth, keys["node"]).items() if k is not None}
    for zone_name in ("UTC", "Europe/Berlin", "Pacific/Kiritimati", "America/St_Johns"):
        zone = ZoneInfo(zone_name)
        for by in ("day", "week", "month"):
            rows = report_rows(cost_report(engine, by=by, tz=zone_name))
            assert rows == grouped(truth, lambda c, by=by, zone=zone: local_period(c.at_us, by, zone)), (zone, by)
    # Each home's filtered report is its share, and the shares add up to the whole.
    shares = [measures(cost_report(engine, home_labels=(label,), tz="UTC")["total"]) for label in set(homes_of.values())]
    assert [sum(column) for column in zip(*shares, strict=True)] == total

    # runs: one row per run, its spend the run's; show: its charges the same.
    listed = list_runs(engine)
    assert sorted(r["run_id"] for r in listed) == sorted({c for c in homes_of})
    for row in listed:
        expected = by_run.get(row["run_id"], [0, 0, 0, 0, 0, 0, 0])
        assert [row[name] for name in MEASURES] == expected, row["run_id"]
        assert row["home"] == homes_of[row["run_id"]]
    for row in random.Random(7).sample(listed, 25):
        shown = show_run(engine, row["run_id"])
        assert sums(Charge(row["run_id"], None, None, c["cost_nano_usd"], tuple(c[t] for t in TOKENS), "", None, None)
                    for c in shown["charges"]) == by_run.get(row["run_id"], [0] * 7)

    # metrics: per runtime and graph, exact decimal text.
    families = {f["name"]: f["samples"] for f in metrics.collect(engine)}
    spend = {(s[0]["runtime"], s[0]["graph"]): nanos(s[1]) for s in families["omg_ledger_known_spend_usd"]}
    calls = {(s[0]["runtime"], s[0]["graph"]): int(s[1]) for s in families["omg_ledger_invocations"]}
    unpriced = {(s[0]["runtime"], s[0]["graph"]): int(s[1]) for s in families["omg_ledger_unpriced_invocations"]}
    expected = grouped(truth, lambda c: (c.runtime, c.graph if c.graph is not None else "(no graph)"))
    assert {k: [spend[k], calls[k], unpriced[k]] for k in spend} == {k: v[:3] for k, v in expected.items()}

    # The HTML report's figures: its total, and its days stacked by runtime.
    page = overview(engine, tz="Europe/Berlin")
    assert measures(page["total"]) == total
    days = defaultdict(lambda: [0, 0, 0])
    for day in page["days"]:
        for runtime, cell in day["runtimes"].items():
            days[(day["day"], runtime)] = [cell["cost_nano_usd"], cell["invocations"], cell["unknown_cost_invocations"]]
    berlin = ZoneInfo("Europe/Berlin")
    assert dict(days) == {k: v[:3] for k, v in grouped(
        truth, lambda c: (local_period(c.at_us, "day", berlin), c.runtime)).items()}

    # The views a notebook reads, and a saved query over them.
    with engine.connect() as conn:
        charges = conn.execute(text("SELECT COALESCE(SUM(cost_nano_usd), 0), COUNT(*), "
                                    "COUNT(*) - COUNT(cost_nano_usd) FROM v_charges")).one()
        runs = conn.execute(text("SELECT COALESCE(SUM(cost_nano_usd), 0), COUNT(*) FROM v_runs")).one()
        nodes = conn.execute(text("SELECT COALESCE(SUM(cost_nano_usd), 0) FROM v_nodes")).scalar()
    assert [int(v) for v in charges] == total[:3]
    assert [int(v) for v in runs] == [total[0], len(homes_of)]
    assert int(nodes) == sum(c.nanos or 0 for c in truth if c.node_id is not None)
    by_graph = run_saved(engine, "spend_by_graph")
    graph_rows = {row[0]: [int(row[2] or 0), int(row[4]), int(row[5])] for row in by_graph.rows}
    assert graph_rows == {k: v[:3] for k, v in grouped(truth, keys["graph"]).items()}


def _sync(url: str, *homes: tuple[str, Path]):
    engine = open_ledger(url)
    sync(engine, [Home.from_path(str(path), label) for label, path in homes])
    return engine


def test_every_report_equals_the_run_files_read_by_hand(db_url, homes):
    engine = _sync(db_url, *homes.items())
    truth = charges_on_disk(homes["corpus"]) + charges_on_disk(homes["scale"])
    assert sums(truth)[:3] == [317_533_280_000, 4957, 376]  # $317.53328 in 4,957 calls, 376 unpriced
    homes_of = {d.name: label for label, home in homes.items() for d in (home / "runs").iterdir()}
    _check_every_report(engine, truth, homes_of)


def _backup(source: Path, target: Path, seed: int) -> None:
    """A backup of every run of ``source``: whole, taken mid-run (its stream cut at any
    byte, a line half written included, its state.json as it was later), or without its
    stream."""
    shutil.copytree(source, target)
    for root, dirs, files in os.walk(target):
        for name in dirs + files:
            (Path(root) / name).chmod(0o700)
    rng = random.Random(seed)
    for run_dir in sorted((target / "runs").iterdir()):
        stream = run_dir / "events.jsonl"
        kind = rng.random()
        if kind < 0.4:
            data = stream.read_bytes()
            stream.write_bytes(data[:rng.randrange(len(data) + 1)])
            (run_dir / "assess.json").unlink(missing_ok=True)  # written after the run's last line
        elif kind < 0.5:
            stream.unlink()


@pytest.mark.parametrize("order", ["together", "backup first", "original first"])
def test_copies_of_the_runs_in_a_second_home_are_billed_once_in_every_report(db_url, homes, tmp_path, order):
    original, backup = tmp_path / "original", tmp_path / "backup"
    shutil.copytree(homes["scale"], original)
    _backup(original, backup, seed=len(order))
    age_tree(original)
    age_tree(backup)
    if order == "together":
        engine = _sync(db_url, ("original", original), ("backup", backup))
    elif order == "backup first":
        _sync(db_url, ("backup", backup)).dispose()
        engine = _sync(db_url, ("original", original))
    else:
        _sync(db_url, ("original", original)).dispose()
        engine = _sync(db_url, ("backup", backup))
    truth = charges_on_disk(original)
    # Where a backup holds the whole run (same stream, same assessment) either copy may be
    # the billed one; the bill is the same. Any other backup holds less and is never billed.
    billed = {r["run_id"]: r["home"] for r in list_runs(engine)}
    for run_dir in (backup / "runs").iterdir():
        whole = (run_dir / "events.jsonl").exists() and (run_dir / "events.jsonl").read_bytes() == \
            (original / "runs" / run_dir.name / "events.jsonl").read_bytes()
        if not whole:
            assert billed[run_dir.name] == "original", run_dir.name
    _check_every_report(engine, truth, billed)


ZONES = ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "America/Santiago",
         "America/Havana", "Asia/Kathmandu", "America/St_Johns", "Africa/Casablanca")


def _instants() -> list[datetime]:
    """Instants a period or window boundary can fall on: every offset change of ZONES in
    2026 (Lord Howe's is 30 minutes, Santiago's and Havana's at local midnight), local
    midnights, and a microsecond either side of each."""
    moments = set()
    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
    for name in ZONES:
        zone = ZoneInfo(name)
        at, offset = start, start.astimezone(zone).utcoffset()
        while at < end:
            after = at + timedelta(minutes=15)
            if after.astimezone(zone).utcoffset() != offset:
                moments.add(after)
                midnight = after.astimezone(zone).replace(hour=0, minute=0, second=0, microsecond=0, fold=0)
                moments.add(midnight.astimezone(UTC))
                offset = after.astimezone(zone).utcoffset()
            at = after
    for first_of_month in range(1, 13):
        for name in ZONES:
            moments.add(datetime(2026, first_of_month, 1, tzinfo=ZoneInfo(name)).astimezone(UTC))
    return sorted(m + timedelta(microseconds=d) for m in moments for d in (-1, 0, 1))


def test_periods_and_windows_cut_every_charge_where_zoneinfo_puts_it(db_url, tmp_path):
    """A charge a microsecond either side of each DST change and local midnight of nine
    zones: `cost --by day|week|month --tz` puts it in the period its own instant falls in
    there, each row's [start, end) holds exactly its charges, and a window
    [since, until) given by two of those instants holds exactly the charges in it."""
    rng = random.Random(2026)
    instants = _instants()
    charges = [(at, rng.randrange(1, 10**6) * 1000 if rng.random() > 0.1 else None) for at in instants]
    home = tmp_path / "home"
    for n, start in enumerate(range(0, len(charges), 40)):
        chunk = charges[start:start + 40]
        run_id = f"20260101-000000.{n:09d}-1"

        def ts(at: datetime) -> str:  # nanoseconds the ledger cuts to microseconds
            return at.strftime("%Y-%m-%dT%H:%M:%S.%f") + f"{rng.randrange(1000):03d}Z"

        stream = [{"schema": 3, "ts": ts(chunk[0][0]), "event": "run_started"}]
        for i, (at, cost) in enumerate(chunk):
            money = {"cost_unknown": True} if cost is None else {"cost_usd": float(Decimal(cost) / 10**9)}
            stream += [{"schema": 3, "ts": ts(at), "event": "node_started", "node_id": f"n{i}"},
                       {"schema": 3, "ts": ts(at), "event": "node_passed", "node_id": f"n{i}", **money}]
        stream.append({"schema": 3, "ts": ts(chunk[-1][0]), "event": "run_finished", "outcome": "passed"})
        write_run(home, run_id, stream)
    age_tree(home)
    engine = _sync(db_url, ("hand", home))
    assert measures(cost_report(engine, tz="UTC")["total"])[:2] == [sum(n or 0 for _, n in charges), len(charges)]

    def expected(moments) -> list[int]:
        moments = list(moments)
        return [sum(n or 0 for _, n in moments), len(moments), sum(n is None for _, n in moments)]

    for name in ZONES:
        zone = ZoneInfo(name)
        for by in ("day", "week", "month"):
            report = cost_report(engine, by=by, tz=name)
            periods = defaultdict(list)
            for at, cost in charges:
                periods[local_period((at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1),
                                     by, zone)].append((at, cost))
            assert {r["key"]: measures(r)[:3] for r in report["rows"]} == \
                {k: expected(v) for k, v in periods.items()}, (name, by)
            for row in report["rows"]:
                since, until = datetime.fromisoformat(row["start"]), datetime.fromisoformat(row["end"])
                assert measures(row)[:3] == expected(c for c in charges if since <= c[0] < until), (name, by, row)
    for _ in range(60):
        since, until = sorted(rng.sample(instants, 2))
        if since == until:
            continue
        name = rng.choice(ZONES)
        window = cost_report(engine, since=since.astimezone(ZoneInfo(name)).isoformat(),
                             until=until.isoformat(), tz=name)
        assert measures(window["total"])[:3] == expected(c for c in charges if since <= c[0] < until), (since, until)
