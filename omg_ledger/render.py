"""Plain-text rendering for the terminal: tables, money, a progress bar.

Every string that came from a run directory goes through :func:`safe` before it
reaches the terminal: stored text is kept verbatim, but never interpreted (no escape
sequences pass through).
"""

from __future__ import annotations

import sys
import time

from .units import format_usd


def safe(text: object) -> str:
    """Printable text: control characters (ESC, BEL, CR, …) shown as \\x.. escapes."""
    if text is None:
        return ""
    out = []
    for ch in str(text):
        code = ord(ch)
        if code < 32 and ch not in "\t" or 127 <= code < 160:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "".join(out)


def money(nanos: int | None, unknown_count: int = 0) -> str:
    """Known spend, as a lower bound when some invocations have no known price."""
    if unknown_count and not nanos:
        return f"unknown ({unknown_count} unpriced)"
    text = format_usd(nanos or 0)
    if unknown_count:
        return f"≥ {text} +{unknown_count} unpriced"
    return text


def table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: list[str]) -> str:
        return "  ".join(c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(cells)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def tokens(row: dict) -> str:
    values = [row.get(k) or 0 for k in ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")]
    return "-" if not any(values) else "/".join(str(v) for v in values)


def runs_table(rows: list[dict]) -> str:
    if not rows:
        return "no runs in the ledger match (run `omg-ledger sync` first?)"
    body = []
    for r in rows:
        nodes = "-" if r["nodes_total"] is None else f"{r['nodes_passed']}/{r['nodes_total']}"
        body.append([r["run_id"], safe(r["graph"] or "-"), nodes, str(r["legs"]),
                     money(r["cost_nano_usd"], r["unknown_cost_invocations"]), tokens(r),
                     r["status"] + (" (gone)" if r["gone"] else ""), (r["started_at"] or "-")[:19]])
    text = table(["RUN", "GRAPH", "NODES", "LEGS", "COST", "TOKENS(I/C/O/R)", "STATUS", "STARTED (UTC)"], body,
                 right={2, 3})
    total = sum(r["cost_nano_usd"] or 0 for r in rows)
    unknown = sum(r["unknown_cost_invocations"] for r in rows)
    notes = [f"\n{len(rows)} run(s), known spend {money(total, unknown)}"]
    notes += [f"\n{safe(r['hint'])}" for r in rows if r["hint"]]
    return text + "".join(notes)


def run_detail(d: dict) -> str:
    out = [f"run {d['run_id']}  [{d['status']}]  home {safe(d['home'])}",
           f"graph {safe(d['graph'] or '-')}  runtime {d['runtime'] or '-'}  legs {d['legs']}  "
           f"spend {money(d['cost_nano_usd'], d['unknown_cost_invocations'])}  "
           f"invocations {d['invocations']}  unrecorded attempts {d['unrecorded_attempts']}"]
    if d["hint"]:
        out.append(safe(d["hint"]))
    out.append("\nLEGS")
    out.append(table(["#", "PHASE", "KIND", "STARTED", "OUTCOME", "DETAIL"], [
        [str(leg["ordinal"]), leg["phase"], leg["kind"], (leg["started_at"] or "-")[:23],
         leg["outcome"] or ("open" if leg["is_open"] else leg["closed_by"] or "-"), safe(leg["detail"] or "")[:80]]
        for leg in d["legs"]]) if d["legs"] else "  (none: the stream has said nothing)")
    out.append("\nNODES")
    out.append(table(["NODE", "VERDICT", "STATE", "PROVENANCE", "ROUND", "RETRIES", "COST", "FILES"], [
        [safe(n["node_id"]), n["verdict"] or "-", n["state"], n["provenance"] or "-", str(n["round"] or 0),
         str(n["retries"] or 0), money(n["cost_nano_usd"], n["unknown_cost_invocations"]),
         ",".join(x for x, ok in (("out", n["has_artifact"]), ("failed", n["has_failed_output"])) if ok) or "-"]
        for n in d["nodes"]]) if d["nodes"] else "  (none)")
    out.append("\nCHARGES")
    out.append(table(["#", "KIND", "LEG", "NODE", "ROUND", "AT", "COST"], [
        [str(c["seq"]), c["kind"], str(c["leg_ordinal"] or "-"), safe(c["node_id"] or "-"), str(c["round"] or 0),
         (c["at"] or "-")[:23], money(c["cost_nano_usd"], 1 if c["cost_unknown"] else 0)]
        for c in d["charges"]]) if d["charges"] else "  (none)")
    if d["goal_cycle"]:
        g = d["goal_cycle"]
        out.append(f"\nGOAL cycle {g['cycle']}/{g['max_cycles']} of {g['first_run_id']}: {safe(g['text'])}")
        if g["assessed"]:
            out.append(f"  assessed: goal_met={g['goal_met']} cost {money(g['assess_cost_nano_usd'])}"
                       f"  remaining: {safe(g['remaining'] or '-')}")
    out.append("\nFINDINGS")
    out.extend(f"  {f['kind']}: {safe(f['detail'])}" for f in d["findings"]) if d["findings"] else out.append("  (none)")
    if d["problems"]:
        out.append("\nPROBLEMS")
        out.extend(f"  {safe(p['path'])} at byte {p['byte_offset']}: {safe(p['reason'])}" for p in d["problems"])
    return "\n".join(out)


def sync_summary(report) -> str:
    return (f"synced {report.runs_seen} run(s): {report.runs_changed} changed, {report.events_ingested} new "
            f"event(s), {report.bytes_read} bytes read, {len(report.problems)} problem(s) in "
            f"{report.seconds:.2f}s")


class progress_bar:
    """A one-line progress bar on stderr, redrawn at most 10 times a second."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.last = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done != total and now - self.last < 0.1:
            return
        self.last = now
        width = 30
        filled = int(width * done / total) if total else width
        sys.stderr.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
