"""The README's pandas snippet runs verbatim against the demo ledger, and money stays
exact integers with NULLs (nullable Int64, not float64)."""

from __future__ import annotations

import re
import subprocess
import sys

from .conftest import REPO

DEMO_LEDGER_LINE = 'LEDGER = "examples/demo-ledger.sqlite"'


def readme_pandas_snippet() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if "import pandas" in b]
    assert len(found) == 1, "README should have exactly one pandas snippet"
    assert found[0].count(DEMO_LEDGER_LINE) == 1, "the snippet names its ledger on one line"
    return found[0]


def test_readme_pandas_snippet_runs_on_the_demo_ledger_with_exact_integers(tmp_path):
    ledger = tmp_path / "demo-ledger.sqlite"
    subprocess.run([sys.executable, "-m", "omg_ledger.cli", "sync", "--db", str(ledger),
                    "--home", str(REPO / "examples" / "home")], check=True, capture_output=True)
    code = readme_pandas_snippet().replace(DEMO_LEDGER_LINE, f"LEDGER = {str(ledger)!r}")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - the README's own snippet
    charges, daily = namespace["charges"], namespace["daily"]
    assert str(charges["cost_nano_usd"].dtype) == "Int64"
    assert str(daily["cost_nano_usd"].dtype) == "Int64"
    # The README's session over examples/home: known spend $1.7167, 6 unpriced invocations.
    assert charges["cost_nano_usd"].isna().sum() == 6
    assert int(daily["cost_nano_usd"].sum()) == 1_716_700_000
    assert int(daily["unpriced"].sum()) == 6
    # NULL stays unknown: no unknown charge turned into a number.
    assert charges.loc[charges["cost_unknown"] == 1, "cost_nano_usd"].isna().all()
