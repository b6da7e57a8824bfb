"""The bare walk: the stat calls a no-op sync cannot avoid, and nothing else.

List ``runs/`` (sorted, as the sync does), then per run stat the directory,
``events.jsonl``, ``failed/`` and each snapshot JSON file that exists (the list of
those comes from the home's manifest, read before the clock starts — the sync knows
it from the ledger). This is the floor a no-op sync is compared with:

    python -m benchmarks.walk HOME
"""

from __future__ import annotations

import os
import sys
import time

import orjson


def walk(home: str, json_names: dict[str, list[str]]) -> dict:
    started = time.perf_counter()
    stats = 0
    runs_dir = os.path.join(home, "runs")
    entries = sorted(os.scandir(runs_dir), key=lambda e: e.name)
    for entry in entries:
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            continue
        path = entry.path
        for name in ("", "events.jsonl", "failed", *json_names.get(entry.name, ())):
            try:  # noqa: SIM105 - cheaper than contextlib.suppress in this loop
                os.stat(os.path.join(path, name) if name else path, follow_symlinks=False)
            except OSError:
                pass
            stats += 1
    return {"seconds": time.perf_counter() - started, "runs": len(entries), "stats": stats}


def main() -> None:
    home = sys.argv[1]
    with open(os.path.join(home, "manifest.json"), "rb") as f:
        json_names = orjson.loads(f.read())["json_names"]
    sys.stdout.write(orjson.dumps(walk(home, json_names)).decode() + "\n")


if __name__ == "__main__":
    main()
