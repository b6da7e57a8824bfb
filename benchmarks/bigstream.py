"""One huge run stream, and its sync's peak memory and time (issue 13: a 2 GB stream).

The stream is valid input of the contract (RUN-FEED.md, schema 3): legs of a graph
of ``NODES`` nodes, each leg ``run_started`` → per node ``node_started`` +
``node_passed``/``node_failed`` with cost, usage, session and a ~280-rune detail (the
producer's bound is "roughly 300 runes") → ``run_finished``; a failed leg is retried by
the next. Each terminal line also carries ``transcript``, an additive field the
contract says consumers ignore, which makes the lines large (a few KB) so that a
gigabyte of stream is a realistic number of events rather than tens of millions of
tiny ones. Every third leg's node events also cost an unknown price (Codex-like).

Money is hand-computable: every known charge is ``COST_USD``, so a run of ``legs``
legs costs ``legs * NODES * COST_USD * 2/3``-ish (exactly: see ``expected_known_nanos``).

    .venv/bin/python -m benchmarks.bigstream --size 2G [--work-dir DIR] [--limit-as 3G]

writes a home with one run whose stream is that big, syncs it with the venv's
``omg-ledger`` in a child process (optionally under an address-space limit), then
appends one leg and syncs again, and prints each sync's wall time and peak RSS
(``ru_maxrss`` from ``wait4``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

NODES = 40
COST_USD = 0.0125  # exactly 12_500_000 nano-dollars
COST_NANOS = 12_500_000
TRANSCRIPT_CHARS = 3000
RUN_ID = "20261129-100000-big"
LINE_SECOND_NS = 1_000_000  # one event per millisecond


def _ts(index: int) -> str:
    total_ns = index * LINE_SECOND_NS
    seconds, ns = divmod(total_ns, 10**9)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    return f"2026-{1 + days // 28:02d}-{1 + days % 28:02d}T{hour:02d}:{minute:02d}:{second:02d}.{ns:09d}Z"


def leg_lines(leg: int, first_index: int, run_id: str = RUN_ID) -> list[bytes]:
    """The lines of leg ``leg`` (0-based); event ``first_index`` is its first line's ordinal."""
    unknown = leg % 3 == 2
    failed_node = leg % 2 == 0  # even legs fail on their last node, the next leg retries
    out = []
    index = first_index

    def line(data: dict) -> None:
        nonlocal index
        out.append(json.dumps({"schema": 3, "ts": _ts(index), "run_id": run_id, **data},
                              separators=(",", ":")).encode() + b"\n")
        index += 1

    line({"event": "run_started"})
    filler = ("lorem ipsum dolor sit amet " * (TRANSCRIPT_CHARS // 27 + 1))[:TRANSCRIPT_CHARS]
    for n in range(NODES):
        node = f"stage{n // 10}/node{n:03d}"
        session = f"sess-{leg:06d}-{n:03d}"
        line({"event": "node_started", "node_id": node, "session_id": session})
        fails = failed_node and n == NODES - 1
        detail = (f"leg {leg} node {n}: " + "checked the output against the spec; " * 8)[:280]
        terminal = {"event": "node_failed" if fails else "node_passed", "node_id": node,
                    "verdict": "FAIL" if fails else "PASS", "session_id": session, "detail": detail,
                    "usage": {"input_tokens": 1000 + n, "cached_input_tokens": 500, "output_tokens": 200 + n},
                    "transcript": filler}
        if unknown:
            terminal["cost_unknown"] = True
        else:
            terminal["cost_usd"] = COST_USD
        line(terminal)
    line({"event": "run_finished", "outcome": "failed" if failed_node else "passed",
          "detail": "a node failed" if failed_node else ""})
    return out


LINES_PER_LEG = 2 + 2 * NODES


def expected_known_nanos(legs: int) -> int:
    return sum(NODES * COST_NANOS for leg in range(legs) if leg % 3 != 2)


def expected_unknown(legs: int) -> int:
    return sum(NODES for leg in range(legs) if leg % 3 == 2)


def write_stream(path: Path, size: int, run_id: str = RUN_ID) -> int:
    """Write whole legs until the file is at least ``size`` bytes; returns the legs written."""
    legs = 0
    written = 0
    with open(path, "wb") as f:
        while written < size:
            chunk = b"".join(leg_lines(legs, legs * LINES_PER_LEG, run_id))
            f.write(chunk)
            written += len(chunk)
            legs += 1
    return legs


def append_legs(path: Path, legs_before: int, count: int, run_id: str = RUN_ID) -> int:
    with open(path, "ab") as f:
        for leg in range(legs_before, legs_before + count):
            f.write(b"".join(leg_lines(leg, leg * LINES_PER_LEG, run_id)))
    return legs_before + count


def make_home(root: Path, size: int, run_id: str = RUN_ID) -> tuple[Path, int]:
    home = root / "home"
    run = home / "runs" / run_id
    run.mkdir(parents=True, exist_ok=True)
    return home, write_stream(run / "events.jsonl", size, run_id)


def omg_ledger_cli() -> str:
    return str(Path(sys.executable).with_name("omg-ledger"))


def measured_sync(home: Path, db: Path, limit_as: int | None = None) -> dict:
    """One `omg-ledger sync --json` in a child process: exit code, report, wall time and
    the child's own peak RSS (reaped with wait4), under an address-space limit if given."""

    def limit() -> None:
        if limit_as is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    started = time.monotonic()
    proc = subprocess.Popen([omg_ledger_cli(), "sync", "--json", "--db", str(db), "--home", str(home)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit)
    # Read the pipes to their end, then reap the child ourselves to get its rusage.
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    return {"rc": proc.returncode, "stdout": out.decode(), "stderr": err.decode(), "seconds": seconds,
            "report": json.loads(out) if proc.returncode == 0 and out else None,
            "max_rss_mib": usage.ru_maxrss / 1024}


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2G", help="stream size (e.g. 400M, 2G)")
    parser.add_argument("--work-dir", default="benchmarks/work/bigstream")
    parser.add_argument("--limit-as", default=None, help="address-space limit of the sync (e.g. 3G)")
    parser.add_argument("--keep", action="store_true", help="keep the home and ledger")
    args = parser.parse_args()
    root = Path(args.work_dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    started = time.monotonic()
    home, legs = make_home(root, _size(args.size))
    stream = home / "runs" / RUN_ID / "events.jsonl"
    print(f"stream: {stream.stat().st_size / 2**20:.0f} MiB, {legs * LINES_PER_LEG} lines, {legs} legs "
          f"(written in {time.monotonic() - started:.1f} s)")
    limit = _size(args.limit_as) if args.limit_as else None
    db = root / "ledger.sqlite"
    for label in ("cold sync", "append of one leg"):
        if label != "cold sync":
            legs = append_legs(stream, legs, 1)
        result = measured_sync(home, db, limit)
        report = result["report"] or {}
        print(f"{label}: exit {result['rc']}, {result['seconds']:.1f} s, peak RSS {result['max_rss_mib']:.0f} MiB, "
              f"events ingested {report.get('events_ingested')}, events derived {report.get('events_derived')}")
        if result["rc"] != 0:
            print(result["stderr"][-2000:])
            break
    import sqlite3
    with sqlite3.connect(db) as conn:
        cost, unknown = conn.execute("SELECT cost_nano_usd, unknown_cost_invocations FROM runs").fetchone()
    ok = cost == expected_known_nanos(legs) and unknown == expected_unknown(legs)
    print(f"ledger: cost {cost} nano-USD, {unknown} unknown-cost invocations "
          f"({'as computed by hand' if ok else 'WRONG: expected ' + str(expected_known_nanos(legs))})")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
