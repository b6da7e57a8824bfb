"""`metrics`: the ledger as Prometheus text exposition (format 0.0.4), for node_exporter's
textfile collector.

Every figure is over all time, like ``cost`` without a window. Money is known spend only;
unpriced work is its own series. All series are gauges: a re-derivation may correct a sum
downwards, which a counter must never do.

* ``omg_ledger_known_spend_usd{runtime,graph}``, ``omg_ledger_invocations{runtime,graph}``,
  ``omg_ledger_unpriced_invocations{runtime,graph}`` — from the charges table. ``runtime``
  is ``(no snapshot)`` for a run that never wrote state.json, ``graph`` ``(no graph)``
  for one with no graph (the keys ``cost --by runtime`` and ``--by node`` use, as the
  tables show them: a control or bidi character as an escape such as ``\\x1b``).
* ``omg_ledger_runs{status}`` — runs by their live status now (every status, 0 included).
* ``omg_ledger_abandoned_runs`` — ABANDONED runs now (each may have an orphan spending).
* ``omg_ledger_open_problems`` — recorded input problems still open (not resolved by a later sync).
* ``omg_ledger_last_event_timestamp_seconds`` — the newest event of any run (absent when
  the ledger is empty).
* ``omg_ledger_last_sync_timestamp_seconds{home}`` — when each home's last sync completed;
  alert on ``time() - omg_ledger_last_sync_timestamp_seconds > 900`` for a cron that
  stopped. (A timestamp, not an age: the textfile is read long after it was written.)
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import TYPE_CHECKING

from ..backend import reading
from ..invocations import parse_rfc3339
from ..render import inert
from ..status import ABANDONED, STATUSES
from ..units import NANOS_PER_USD, instant_to_us, summed
from .cost import exact_sum, joined_sum
from .graphs import NO_GRAPH
from .runs import iter_runs

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

NO_SNAPSHOT = "(no snapshot)"


def _shown(name: str) -> str:
    """A name as its label holds it: run text never drives a terminal, nor splits a line
    for a reader with universal newlines, so controls and bidi characters are the escapes
    every table shows (render.inert); a line feed stays, for the format's own escape."""
    return inert(name, keep_newlines=True)


def _label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _usd(nanos: int) -> str:
    """Exact decimal dollars from nano-dollars (no float rounding in the text)."""
    value = Decimal(nanos) / NANOS_PER_USD
    return format(value.normalize(), "f") if nanos else "0"


def _seconds(us: int) -> str:
    return format((Decimal(us) / 1_000_000).normalize(), "f")


# Spend and invocations by runtime and graph, over the billed copies (a run copied into
# several homes counts once); the keys `cost --by runtime` and `--by node` use. Known
# spend is summed in two parts: twelve runs at the per-run bound pass SQLite's 2**63.
_SPEND_SQL = (
    "SELECT CASE WHEN r.runtime IS NOT NULL THEN r.runtime "
    f"WHEN r.snapshot_schema IS NULL THEN '{NO_SNAPSHOT}' ELSE '(unknown)' END AS runtime, "
    f"COALESCE(r.graph_name, '{NO_GRAPH}') AS graph, {exact_sum('c.cost_nano_usd', 'known')}, "
    "COUNT(*) AS invocations, "
    "SUM(CASE WHEN c.cost_nano_usd IS NULL THEN 1 ELSE 0 END) AS unpriced "
    "FROM charges c JOIN runs r ON r.id = c.run_pk WHERE r.billed GROUP BY 1, 2")


def collect(engine: Engine) -> list[dict]:
    """Metric families: {name, help, samples: [(labels dict, value text)]}. Read through
    the DB-API, like `runs` (a scrape every few seconds need not import SQLAlchemy)."""
    with reading(engine) as reader:
        # Names that show alike are one series (a scrape refuses two samples of one label set).
        groups: dict[tuple[str, str], list[int]] = {}  # (runtime, graph) -> known nanos, invocations, unpriced
        for g in reader.dicts(_SPEND_SQL):
            into = groups.setdefault((_shown(g["runtime"]), _shown(g["graph"])), [0, 0, 0])
            into[0] += joined_sum(g["known_hi"], g["known_lo"], g["known_odd"])
            into[1] += int(g["invocations"])
            into[2] += summed(g["unpriced"])
        problems = reader.scalar("SELECT COUNT(*) FROM problems WHERE resolved_at IS NULL") or 0
        newest_us = reader.scalar("SELECT MAX(last_event_at_us) FROM runs")
        synced: dict[str, int] = {}  # home -> its last sync; of homes that show alike, the oldest
        for label, at in reader.rows("SELECT label, last_synced_at FROM homes WHERE last_synced_at IS NOT NULL"):
            try:
                us = instant_to_us(parse_rfc3339(at))
            except (TypeError, ValueError):
                continue  # edited by hand to what is no time: no sample says when (`homes` shows it as stored)
            home = _shown(label)
            synced[home] = min(us, synced.get(home, us))
    statuses = Counter(run["status"] for run in iter_runs(engine))

    def by_group(field: int, text) -> list:
        return [({"runtime": runtime, "graph": graph}, text(sums[field]))
                for (runtime, graph), sums in sorted(groups.items())]

    families = [
        {"name": "omg_ledger_known_spend_usd", "help": "Known spend in US dollars (unpriced invocations not included).",
         "samples": by_group(0, _usd)},
        {"name": "omg_ledger_invocations", "help": "Paid invocations (charges), priced or not.",
         "samples": by_group(1, str)},
        {"name": "omg_ledger_unpriced_invocations", "help": "Invocations with no known price (cost_unknown).",
         "samples": by_group(2, str)},
        {"name": "omg_ledger_runs", "help": "Runs by their live status now.",
         "samples": [({"status": s}, str(statuses.get(s, 0))) for s in STATUSES]},
        {"name": "omg_ledger_abandoned_runs",
         "help": "ABANDONED runs now: a leg died; a model-CLI subprocess may still be spending.",
         "samples": [({}, str(statuses.get(ABANDONED, 0)))]},
        {"name": "omg_ledger_open_problems", "help": "Open input problems (bad or unreadable run files not fixed since).",
         "samples": [({}, str(int(problems)))]},
    ]
    if newest_us is not None:
        families.append({"name": "omg_ledger_last_event_timestamp_seconds",
                         "help": "Unix time of the newest event of any run in the ledger.",
                         "samples": [({}, _seconds(int(newest_us)))]})
    if synced:
        families.append({"name": "omg_ledger_last_sync_timestamp_seconds",
                         "help": "Unix time at which the last sync of each home completed.",
                         "samples": [({"home": label}, _seconds(us)) for label, us in sorted(synced.items())]})
    return families


def exposition(families: list[dict]) -> str:
    out = []
    for family in families:
        out.append(f"# HELP {family['name']} {_help(family['help'])}")
        out.append(f"# TYPE {family['name']} gauge")
        for labels, value in family["samples"]:
            text = ",".join(f'{k}="{_label_value(str(v))}"' for k, v in labels.items())
            out.append(f"{family['name']}{{{text}}} {value}" if text else f"{family['name']} {value}")
    return "\n".join(out) + "\n"
