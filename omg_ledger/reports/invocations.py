"""`omg-ledger invocations`: role invocations of runners, from their events.jsonl streams.

Counts, failures by status, p50/p95/max durations per role, status or milestone, and
the starts still dangling now (an actor a display would show as working, with how
long ago it started). Queries and shaping only; :func:`to_text` / :func:`to_csv`
return strings for the CLI to print.

Definitions (from :mod:`omg_ledger.invocations`):

* an *invocation* is one row of ``invocations``: a paired start/end, a start closed by
  ``recover``, a dangling start, or an end whose start was never seen;
* a *failure* is an end whose status is neither a success (DONE, GO, SUCCESS,
  OBSERVED, READY, ACCEPT) nor a judged verdict (BLOCKED, NEEDS_DEEP, NO-GO,
  NEEDS_CONFIRMATION): runner error codes, thrown errors, recover's
  INVOCATION_FAILURE, and any status we do not know;
* percentiles are nearest-rank over the invocations that have a duration;
* ``--since T`` keeps invocations that started at or after T (an end without a start:
  that ended at or after T). Dangling starts are listed whatever their age: a start
  from last month that never ended is still shown as working. Each names the machine
  whose runner stream holds it (``streams.source``, as ``homes.machine``): streams at
  the same path on two machines are two streams.
"""

from __future__ import annotations

import csv
import io
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any, Literal

from ..backend import reading
from ..invocations import (
    PairedInvocation,
    classify_status,
    is_failure_status,
    percentile,
    summarize,
)
from ..render import csv_cell, safe, table, when
from ..units import format_instant, instant_to_us, us_to_instant

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

By = Literal["role", "status", "milestone"]
BY_CHOICES: tuple[str, ...] = ("role", "status", "milestone")


def invocation_report(
    engine: Engine, *, now: datetime, by: By = "role", since_us: int | None = None
) -> dict[str, Any]:
    """The report as one JSON-ready dict::

        {"by": "role", "since": "…Z" | None, "now": "…Z",
         "rows": [{"key", "invocations", "failures", "failures_by_status", "dangling",
                   "p50_ms", "p95_ms", "max_ms", "statuses"}, …],
         "total": {same fields, "key": None},
         "dangling": [{"role", "milestone", "started_at", "age_ms", "path", "line", "machine"}, …]}

    ``now`` (aware) is the instant dangling ages are measured from.
    """
    if by not in BY_CHOICES:
        raise ValueError(f"by must be one of {BY_CHOICES}, got {by!r}")
    window, params = ("", {}) if since_us is None else (
        " WHERE COALESCE(started_at_us, ended_at_us) >= :since_us", {"since_us": since_us})
    with reading(engine) as reader:
        rows = [_paired(r) for r in reader.dicts(f"SELECT * FROM invocations{window} ORDER BY file_pk, seq", params)]
        dangling_rows = list(reader.dicts(
            "SELECT i.role, i.milestone, i.started_at, i.started_at_us, i.start_line, f.path, f.source "
            "FROM invocations i JOIN streams f ON f.id = i.file_pk WHERE i.outcome = 'dangling' "
            "ORDER BY i.started_at_us, f.path, f.source, i.seq"))

    now_us = instant_to_us(now)
    return {
        "by": by,
        "since": None if since_us is None else format_instant(us_to_instant(since_us)),
        "now": format_instant(now),
        "rows": [_shape(group, by) for group in summarize(rows, by)],
        "total": _total(rows),
        "dangling": [
            {
                "role": d["role"],
                "milestone": d["milestone"],
                "started_at": d["started_at"],
                "age_ms": None if d["started_at_us"] is None else (now_us - d["started_at_us"]) // 1000,
                "path": d["path"],
                "line": d["start_line"],
                "machine": d["source"],
            }
            for d in dangling_rows
        ],
    }


def _paired(m) -> PairedInvocation:
    return PairedInvocation(
        seq=m["seq"],
        role=m["role"],
        milestone=m["milestone"],
        started_at=m["started_at"],
        ended_at=m["ended_at"],
        status=m["status"],
        duration_ms=m["duration_ms"],
        duration_source=m["duration_source"],
        outcome=m["outcome"],
        start_line=m["start_line"],
        end_line=m["end_line"],
    )


def _failures_by_status(statuses: dict[str, int]) -> dict[str, int]:
    return {s: n for s, n in statuses.items() if classify_status(s) == "failure"}


def _shape(group: dict[str, Any], by: str) -> dict[str, Any]:
    return {
        "key": group[by],
        "invocations": group["invocations"],
        "failures": group["failures"],
        "failures_by_status": _failures_by_status(group["statuses"]),
        "dangling": group["dangling"],
        "p50_ms": group["p50_ms"],
        "p95_ms": group["p95_ms"],
        "max_ms": group["max_ms"],
        "statuses": group["statuses"],
    }


def _total(rows: list[PairedInvocation]) -> dict[str, Any]:
    durations = sorted(r.duration_ms for r in rows if r.duration_ms is not None)
    statuses: dict[str, int] = {}
    for r in rows:
        if r.status is not None:
            statuses[r.status] = statuses.get(r.status, 0) + 1
    statuses = dict(sorted(statuses.items()))
    return {
        "key": None,
        "invocations": len(rows),
        "failures": sum(1 for r in rows if is_failure_status(r.status)),
        "failures_by_status": _failures_by_status(statuses),
        "dangling": sum(1 for r in rows if r.outcome == "dangling"),
        "p50_ms": percentile(durations, 50),
        "p95_ms": percentile(durations, 95),
        "max_ms": durations[-1] if durations else None,
        "statuses": statuses,
    }


# --------------------------------------------------------------------------- rendering


def format_ms(ms: int | None) -> str:
    """1234 -> '1.2s', 754000 -> '12m34s', 9000000 -> '2h30m'; None -> '-'."""
    if ms is None:
        return "-"
    if ms < 0:
        return "-" + format_ms(-ms)
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    if seconds < 86_400:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86_400}d{seconds % 86_400 // 3600:02d}h"


def _counts(counts: dict[str, int]) -> str:
    return " ".join(f"{safe(s)}={n}" for s, n in counts.items())


def to_text(report: dict[str, Any], zone: tzinfo | None = None) -> str:
    """The groups' table, then the starts with no end yet (times in ``zone``, else UTC)."""
    if not report["rows"] and not report["dangling"]:
        return ("no role invocations in the ledger match "
                "(index a runner's events.jsonl with `omg-ledger sync --invocations PATH`)")
    none_label = {"role": "(recover)", "milestone": "(none)", "status": "(no end yet)"}[report["by"]]
    body = [
        [safe(r["key"]) if r["key"] is not None else none_label, str(r["invocations"]), str(r["failures"]),
         str(r["dangling"]), format_ms(r["p50_ms"]), format_ms(r["p95_ms"]), format_ms(r["max_ms"]),
         _counts(r["failures_by_status"]) or "-"]
        for r in report["rows"]
    ]
    t = report["total"]
    body.append(["TOTAL", str(t["invocations"]), str(t["failures"]), str(t["dangling"]), format_ms(t["p50_ms"]),
                 format_ms(t["p95_ms"]), format_ms(t["max_ms"]), _counts(t["failures_by_status"]) or "-"])
    out = [table([report["by"].upper(), "INVOCATIONS", "FAILURES", "DANGLING", "P50", "P95", "MAX",
                  "FAILURES BY STATUS"], body, right={1, 2, 3, 4, 5, 6})]
    if report["since"]:
        out.append(f"since {when(report['since'], zone)}")
    out.append("\nWORKING NOW (a start with no end yet)")
    # Machines are named only where starts of several are listed (one path may be a runner's on each).
    several = len({d["machine"] for d in report["dangling"]}) > 1
    if report["dangling"]:
        header = ["ROLE", "MILESTONE", f"STARTED ({zone or 'UTC'})", "AGO", "FILE:LINE"] + (["MACHINE"] if several else [])
        out.append(table(header, [
            [safe(d["role"] or "-"), safe(d["milestone"] or "-"), when(d["started_at"], zone),
             format_ms(d["age_ms"]), f"{safe(d['path'])}:{d['line']}"] + ([safe(d["machine"])] if several else [])
            for d in report["dangling"]]))
    else:
        out.append("  (none)")
    return "\n".join(out)


CSV_FIELDS = ("key", "invocations", "failures", "dangling", "p50_ms", "p95_ms", "max_ms",
              "failures_by_status", "statuses")


def to_csv(report: dict[str, Any]) -> str:
    """The per-group rows (no total, no dangling list); status counts as 'A=1;B=2'."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_FIELDS)  # "key" like `cost --csv`; the JSON "by" says what it is
    for r in report["rows"]:
        writer.writerow([
            csv_cell(r["key"]),
            *(csv_cell(r[f]) for f in CSV_FIELDS[1:7]),
            csv_cell(";".join(f"{s}={n}" for s, n in r["failures_by_status"].items())),
            csv_cell(";".join(f"{s}={n}" for s, n in r["statuses"].items())),
        ])
    return buffer.getvalue()
