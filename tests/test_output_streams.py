"""Where the output goes: a closed stdout, a full disk, a reader that went away, a
stream whose encoding cannot hold the text, a stderr that cannot be written. Real
processes with real file descriptors (/dev/full, a pipe whose reader is closed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.cli_checks import one_line_error
from tests.test_cost import ledger

CLI = [sys.executable, "-m", "omg_ledger.cli"]


@pytest.fixture
def corpus_db(tmp_path, corpus_home) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    ledger(url, corpus_home, "corpus")
    return url


def run(*args, stdout, stderr=subprocess.PIPE, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], stdout=stdout, stderr=stderr, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def with_stdout_closed(*args) -> subprocess.CompletedProcess:
    # The shell's `cmd >&-`: the command starts with no file descriptor 1 at all.
    return subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *CLI, *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def into_a_gone_reader(*args) -> subprocess.CompletedProcess:
    """stdout a pipe whose reader has already gone: every write is EPIPE (as for
    `| head -1` once head has exited)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return run(*args, stdout=write_end)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [["runs"], ["runs", "--json"], ["audit"], ["metrics"], ["homes", "--json"]])
def test_a_closed_stdout_is_an_error_not_an_empty_success(corpus_db, args):
    line = one_line_error(with_stdout_closed(*args, "--db", corpus_db), 2)
    assert "cannot write the output: stdout is closed" in line


def test_a_command_that_writes_nothing_runs_with_stdout_closed(tmp_path, corpus_home):
    # sync in a pipe or from cron prints nothing: a closed stdout is no reason to fail.
    result = with_stdout_closed("sync", "--home", corpus_home, "--db", tmp_path / "ledger.sqlite")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize("args", [["runs"], ["runs", "--json"], ["cost", "--json"], ["audit"], ["metrics"],
                                  ["sql", "SELECT run_id FROM runs"], ["--help"], ["runs", "--help"]])
def test_a_full_disk_under_stdout_is_one_line_and_exit_2(corpus_db, args):
    with open("/dev/full", "w") as full:
        result = run(*args, *(["--db", corpus_db] if args[-1] != "--help" else []), stdout=full)
    line = one_line_error(result, 2)
    assert "cannot write the output: stdout: No space left on device" in line


def test_a_reader_that_went_away_ends_the_command_quietly_with_its_own_exit_code(corpus_db):
    # The corpus has ABANDONED and PAUSED runs: audit needs attention (1) wherever its
    # output goes; a listing is done (0). Nothing on stderr either way.
    for args, code in [(["audit"], 1), (["audit", "--json"], 1), (["runs", "--json"], 0), (["runs", "--help"], 0)]:
        result = into_a_gone_reader(*args, *(["--db", corpus_db] if args[-1] != "--help" else []))
        assert (result.returncode, result.stderr) == (code, ""), args


def test_json_is_utf_8_whatever_the_locale_says(corpus_db, tmp_path):
    out = tmp_path / "out.json"
    with open(out, "w") as handle:
        result = run("sql", "SELECT 'é☃' AS word", "--json", "--db", corpus_db, stdout=handle,
                     env={"PYTHONIOENCODING": "ascii", "LC_ALL": "C"})
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_bytes().decode("utf-8"))["rows"][0] == {"word": "é☃"}


def test_text_an_encoding_cannot_hold_is_one_line_not_a_traceback(corpus_db):
    result = run("sql", "SELECT '☃' AS word", "--db", corpus_db, stdout=subprocess.PIPE,
                 env={"PYTHONIOENCODING": "latin-1"})
    line = one_line_error(result, 2)
    assert "latin-1" in line and "PYTHONIOENCODING=utf-8" in line


def test_a_stderr_that_cannot_be_written_does_not_change_what_sync_did(tmp_path, corpus_copy):
    run_dir = sorted((corpus_copy / "runs").iterdir())[0]
    with open(run_dir / "events.jsonl", "a") as stream:
        stream.write('{"not json\n')  # one problem line on stderr
    db = tmp_path / "ledger.sqlite"
    with open("/dev/full", "w") as full:
        plain = run("sync", "--home", corpus_copy, "--db", db, stdout=subprocess.PIPE, stderr=full)
        strict = run("sync", "--home", corpus_copy, "--db", tmp_path / "strict.sqlite", "--strict",
                     stdout=subprocess.PIPE, stderr=full)
    assert plain.returncode == 0  # done, the problem recorded
    assert strict.returncode == 1  # done with problems, as --strict says
    listing = run("runs", "--json", "--db", db, stdout=subprocess.PIPE)
    assert len(json.loads(listing.stdout)) == 25
    problems = run("problems", "--json", "--db", db, stdout=subprocess.PIPE)
    assert [p["path"] for p in json.loads(problems.stdout)] == [str(run_dir / "events.jsonl")]
