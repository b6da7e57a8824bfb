"""Checks shared by the tests that run the CLI as a real process."""

from __future__ import annotations

import subprocess


def one_line_error(result: subprocess.CompletedProcess, code: int) -> str:
    """The run ended with `code` and said exactly one `omg-ledger: error:` line, no traceback."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("omg-ledger: error: "), result.stderr
    return lines[0]
