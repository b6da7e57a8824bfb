"""`--home` on a reading command names a home by its label or its directory; a name
that is neither is a usage error, never an empty table or a $0 total that reads as
the answer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from .cli_checks import one_line_error
from .conftest import REPO

EXAMPLES = REPO / "examples" / "home"
RUN = "20261129-181518.131561744-1"  # s12-feedback-2rounds, $0.2010


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omg_ledger.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    """The examples as two homes: "laptop" (25 runs, 1 plan) and an empty one, "spare"."""
    where = tmp_path_factory.mktemp("homes")
    home, spare = where / "home", where / "spare"
    shutil.copytree(EXAMPLES, home, symlinks=True)
    (spare / "runs").mkdir(parents=True)
    db = where / "ledger.sqlite"
    for spec in (f"laptop={home}", f"spare={spare}"):
        assert cli("sync", "--db", db, "--home", spec).returncode == 0
    (where / "link").symlink_to(home)
    return db, home, where / "link"


@pytest.mark.parametrize("args", [["runs"], ["runs", "--json"], ["cost", "--json"], ["cost", "--by", "run"],
                                  ["show", RUN], ["plans"]])
def test_an_unknown_home_is_a_usage_error(ledger, args):
    db, _, _ = ledger
    line = one_line_error(cli(*args, "--db", db, "--home", "nosuch"), 2)
    assert "--home 'nosuch' is no home of this ledger" in line
    assert "(its homes: 'laptop', 'spare';" in line


def test_a_home_is_named_by_its_directory_too(ledger):
    db, home, link = ledger
    by_label = cli("cost", "--db", db, "--json", "--home", "laptop")
    assert by_label.returncode == 0
    assert json.loads(by_label.stdout)["total"]["invocations"] == 71  # every charge of the 25 example runs
    for where in (home, link, f"{home}/"):  # as synced, through a symlink, with a trailing slash
        by_dir = cli("cost", "--db", db, "--json", "--home", where)
        assert by_dir.returncode == 0, by_dir.stderr
        assert json.loads(by_dir.stdout) == json.loads(by_label.stdout)
    listed = cli("runs", "--db", db, "--json", "--home", home)
    assert len(json.loads(listed.stdout)) == 25
    shown = cli("show", RUN, "--db", db, "--json", "--home", home)
    assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == RUN
    plans = cli("plans", "--db", db, "--json", "--home", link)
    assert [p["home"] for p in json.loads(plans.stdout)] == ["laptop"]


def test_an_empty_listing_says_whether_a_filter_left_nothing(ledger, tmp_path):
    db, _, _ = ledger
    filtered = cli("runs", "--db", db, "--home", "spare")
    assert filtered.returncode == 0
    assert filtered.stdout.strip() == "no run matches --since, --status and --home as given"
    empty, bare = tmp_path / "empty.sqlite", tmp_path / "bare-home"
    (bare / "runs").mkdir(parents=True)
    assert cli("sync", "--db", empty, "--home", bare).returncode == 0
    nothing = cli("runs", "--db", empty)
    assert nothing.returncode == 0
    assert nothing.stdout.strip() == "no runs in the ledger yet (run `omg-ledger sync` first)"
