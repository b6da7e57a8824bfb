"""The competitor: a raw dump of the same events with ``sqlite-utils``.

Every complete line of every ``events.jsonl`` of the home (the files the floor and the
sync read, in the same order) is piped into one
``sqlite-utils insert DB events - --nl --alter`` process: one row per event, a column per
key it meets, no validation, no reconciliation. sqlite-utils is a benchmark-only extra
(``pip install -e '.[bench]'``), never a dependency of omg-ledger.

    python -m benchmarks.dump HOME DB
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import orjson


def sqlite_utils() -> str | None:
    beside = Path(sys.executable).parent / "sqlite-utils"
    return str(beside) if beside.exists() else shutil.which("sqlite-utils")


def dump(home: str, db: str) -> dict:
    exe = sqlite_utils()
    if exe is None:
        raise SystemExit("sqlite-utils is not installed: pip install -e '.[bench]'")
    started = time.perf_counter()
    proc = subprocess.Popen([exe, "insert", db, "events", "-", "--nl", "--alter"], stdin=subprocess.PIPE)
    runs = lines = 0
    runs_dir = os.path.join(home, "runs")
    try:
        for entry in sorted(os.scandir(runs_dir), key=lambda e: e.name):
            if not entry.is_dir(follow_symlinks=False):
                continue
            try:
                with open(os.path.join(entry.path, "events.jsonl"), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            complete = data[: data.rfind(b"\n") + 1]  # a torn last line is not an event yet
            runs += 1
            lines += sum(1 for line in complete.splitlines() if line.strip())
            proc.stdin.write(complete)
    finally:
        proc.stdin.close()
    if proc.wait() != 0:
        raise SystemExit(f"sqlite-utils insert failed with exit {proc.returncode}")
    seconds = time.perf_counter() - started
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    conn.close()
    return {"seconds": seconds, "runs": runs, "lines": lines, "rows": rows}


def main() -> None:
    home, db = sys.argv[1], sys.argv[2]
    sys.stdout.write(orjson.dumps(dump(home, db)).decode() + "\n")


if __name__ == "__main__":
    main()
