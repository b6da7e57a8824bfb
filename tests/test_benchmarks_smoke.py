"""The benchmark suite at its smallest size: it runs and produces a table (not how fast)."""

from __future__ import annotations

import subprocess
import sys

from .conftest import CORPUS_HOME, REPO


def test_benchmark_suite_runs_and_writes_a_table(tmp_path):
    if not CORPUS_HOME.is_dir():
        import pytest

        pytest.fail(f"the shared corpus is missing at {CORPUS_HOME} (set OMG_LEDGER_CORPUS)")
    out = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--runs", "50", "--quick",
         "--out", str(out), "--work-dir", str(tmp_path / "work")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "| scenario | runs |" in text and "## Targets" in text
    for title in ("floor: raw load", "stdlib floor: raw load", "competitor: `sqlite-utils insert", "sync, cold",
                  "`omg-ledger --version`", "sync, no-op", "sync, incremental", "bare walk",
                  "runs --json", "cost --since 7d --by day", "cost --by node", "audit", "rebuild"):
        row = next((line for line in text.splitlines() if line.startswith(f"| {title}")), None)
        assert row is not None, f"no row for {title}:\n{text}"
        assert "error" not in row, row
    assert "| sync, no-op (nothing changed) | 50 |" in text and "0 runs changed" in text
    assert "MISMATCH" not in text
    # Issue 14's targets are all listed, each with a verdict (those defined at 10,000 runs: n/a).
    targets = text.split("## Targets", 1)[1]
    for target in ("cold sync ≤ 2× stdlib floor and faster than sqlite-utils", "peak RSS < 150 MB, every command",
                   "PostgreSQL cold sync ≤ 2× SQLite's", "no-op / start-up / report targets"):
        row = next((line for line in targets.splitlines() if line.startswith(f"| {target}")), None)
        assert row is not None, f"no target row {target!r}:\n{targets}"
        assert row.rstrip().endswith(("| met |", "| missed |", "| n/a |")), row
    assert text in proc.stdout  # printed as well as written
