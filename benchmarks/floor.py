"""The floors: the simplest loaders that could index a home.

Walk the runs, read every ``events.jsonl`` line, parse it, insert the raw line into
one table, all in one transaction, in a SQLite file with the ledger's pragmas (WAL,
synchronous NORMAL). No validation, no reconcile, no derived rows: any real sync
costs at least this much. Two parsers:

* ``orjson`` (default): the parser the ledger itself uses;
* ``--stdlib``: ``json.loads``, and every ``state.json`` parsed too (issue 14's
  "stdlib floor": what a loader written with the standard library alone costs).

Run as a child process so its wall time and peak RSS are measured the same way as the
CLI's:

    python -m benchmarks.floor [--stdlib] HOME DB
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time

import orjson


def load(home: str, db: str, stdlib: bool = False) -> dict:
    started = time.perf_counter()
    parse = json.loads if stdlib else orjson.loads
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, line_no INTEGER NOT NULL, "
                 "raw TEXT NOT NULL, PRIMARY KEY (run_id, line_no))")
    conn.execute("BEGIN")
    runs = lines = states = 0
    runs_dir = os.path.join(home, "runs")
    for entry in sorted(os.scandir(runs_dir), key=lambda e: e.name):
        if not entry.is_dir(follow_symlinks=False):
            continue
        if stdlib:
            try:
                with open(os.path.join(entry.path, "state.json"), "rb") as f:
                    json.loads(f.read())
                states += 1
            except FileNotFoundError:
                pass
        try:
            with open(os.path.join(entry.path, "events.jsonl"), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        runs += 1
        rows = []
        for line_no, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            parse(line)
            rows.append((entry.name, line_no, line.decode()))
        conn.executemany("INSERT INTO events VALUES (?, ?, ?)", rows)
        lines += len(rows)
    conn.execute("COMMIT")
    conn.close()
    return {"seconds": time.perf_counter() - started, "runs": runs, "lines": lines, "states": states}


def main() -> None:
    args = sys.argv[1:]
    stdlib = "--stdlib" in args
    home, db = [a for a in args if a != "--stdlib"]
    sys.stdout.write(orjson.dumps(load(home, db, stdlib)).decode() + "\n")


if __name__ == "__main__":
    main()
