"""Hand-made run streams and directories for edge cases the corpus does not have."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from omg_ledger.feed import Event
from omg_ledger.units import parse_timestamp

BASE = "2026-11-29T10:00:{:02d}.000000000Z"


def ev(event: str, second: int = 0, **fields) -> dict:
    return {"schema": 3, "ts": BASE.format(second), "run_id": "r1", "event": event, **fields}


def events(*dicts: dict) -> list[Event]:
    out, offset = [], 0
    for line_no, data in enumerate(dicts, 1):
        raw = json.dumps(data, separators=(",", ":"))
        ts, at_us = parse_timestamp(data["ts"])
        out.append(Event(line_no, offset, data, raw, ts, at_us))
        offset += len(raw.encode()) + 1
    return out


def write_run(home: Path, run_id: str, stream: list[dict] | None = None, state: dict | None = None,
              assess: dict | None = None, extra: dict[str, str] | None = None, lock: str | None = None) -> Path:
    run_dir = home / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    if stream is not None:
        with open(run_dir / "events.jsonl", "w") as f:
            for data in stream:
                f.write(json.dumps({**data, "run_id": run_id}, separators=(",", ":")) + "\n")
    if state is not None:
        (run_dir / "state.json").write_text(json.dumps({"schema": 3, "run_id": run_id, **state}, indent=2))
    if assess is not None:
        (run_dir / "assess.json").write_text(json.dumps(assess))
    for name, content in (extra or {}).items():
        path = run_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    if lock is not None:
        (run_dir / "resume.lock").write_text(lock)
    return run_dir


def graph(*node_ids: str, **types: str) -> dict:
    return {"name": "g", "version": "1", "nodes": [{"id": n, **({"type": types[n]} if n in types else {})}
                                                  for n in node_ids]}


_RUN_ID_FIELD = re.compile(rb'"run_id":\s*"[^"\\]*"')


def retarget(stream: bytes, run_id: str) -> bytes:
    """A stream's lines naming ``run_id``: what the engine would have written for a run
    of that id (a line naming another run is refused as that run's)."""
    field = b'"run_id":' + json.dumps(run_id).encode()
    return _RUN_ID_FIELD.sub(lambda _: field, stream)


def copy_run(src: Path, dst: Path) -> Path:
    """Copy a run directory under another run id, its stream and state.json retargeted
    to that id (a snapshot naming another run is that run's, not used here)."""
    shutil.copytree(src, dst, symlinks=True)
    for name in ("events.jsonl", "state.json"):
        path = dst / name
        if path.is_file() and not path.is_symlink():
            path.write_bytes(retarget(path.read_bytes(), dst.name))
            shutil.copystat(src / name, path)
    return dst


def age_tree(root: Path, seconds: int = 3600) -> None:
    """Move every mtime below ``root`` (links themselves, never their targets) an hour
    back, as in a real home: a fresh mtime is 'racy' and never trusted by the change check."""
    then = time.time() - seconds
    for r, dirs, files in os.walk(root):
        for n in files + dirs:
            os.utime(os.path.join(r, n), (then, then), follow_symlinks=False)
    os.utime(root, (then, then))


# Hand readings of the engine's files, for tests that check the ledger against them (not
# the code's own conversions).


def epoch_us(ts: str) -> int:
    """RFC 3339 with a Z and up to 9 fraction digits, to epoch µs (the rest cut)."""
    second, _, fraction = ts[:-1].partition(".")
    moment = datetime.strptime(second, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000 + int((fraction + "000000")[:6])


def nanos(usd: object) -> int:
    """A dollar amount as written in a file, to exact nano-dollars."""
    value = Decimal(str(usd)) * 10**9
    assert value == value.to_integral_value(), usd
    return int(value)
