"""Plain-text rendering for the terminal: tables, money, a progress bar.

Every string that came from a run directory goes through :func:`safe` before it
reaches the terminal: stored text is kept verbatim, but never interpreted (no escape
sequences pass through).
"""

from __future__ import annotations

import re
import sys
import time

from .units import format_usd

_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def safe(text: object) -> str:
    """Printable text: control characters (ESC, BEL, CR, …) shown as \\x.. escapes."""
    if text is None:
        return ""
    if not _CONTROL.search(str(text)):
        return str(text)  # the common case: nothing to escape
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
    # Every cell may hold text from a run directory: make it inert here, once.
    rows = [[safe(cell) for cell in row] for row in rows]
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


def runs_table(rows: list[dict], width: int | None = None, colour: bool = False) -> str:
    if not rows:
        return "no runs in the ledger match (run `omg-ledger sync` first?)"
    body = []
    for r in rows:
        nodes = "-" if r["nodes_total"] is None else f"{r['nodes_passed']}/{r['nodes_total']}"
        body.append([r["run_id"], safe(r["graph"] or "-"), nodes, grouped(r["leg_count"]),
                     grouped_money(money(r["cost_nano_usd"], r["unknown_cost_invocations"])), grouped_tokens(r),
                     r["status"] + (" (gone)" if r["gone"] else ""), (r["started_at"] or "-")[:19]])
    # Narrow terminals lose tokens, legs, start time and nodes first, then the graph
    # name is cut and dropped, and last the run id is cut (still a prefix for `show`).
    # Money is never cut.
    text = fitted_table(["RUN", "GRAPH", "NODES", "LEGS", "COST", "TOKENS(I/C/O/R)", "STATUS", "STARTED (UTC)"],
                        body, right={2, 3, 4, 5}, width=width,
                        steps=(("drop", 5), ("drop", 3), ("drop", 7), ("drop", 2), ("cut", 1, 12), ("drop", 1),
                               ("cut", 0, 15)),
                        styles={6: status_style} if colour else None)
    total = sum(r["cost_nano_usd"] or 0 for r in rows)
    unknown = sum(r["unknown_cost_invocations"] for r in rows)
    notes = [f"\n{wrapped(f'{len(rows)} run(s), known spend {grouped_money(money(total, unknown))}', width)}"]
    notes += [f"\n{wrapped(safe(r['hint']), width)}" for r in rows if r["hint"]]
    return text + "".join(notes)


def run_detail(d: dict) -> str:
    out = [f"run {safe(d['run_id'])}  [{d['status']}]  home {safe(d['home'])}",
           f"graph {safe(d['graph'] or '-')}  runtime {d['runtime'] or '-'}  "
           f"spend {money(d['cost_nano_usd'], d['unknown_cost_invocations'])}  "
           f"invocations {d['invocations']}  unrecorded attempts {d['unrecorded_attempts']}",
           legs_line(d["legs"])]
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


# -- cost, audit, sql (appended) ---------------------------------------------------------

COST_FIELDS = ["cost_usd", "cost_nano_usd", "cost_is_lower_bound", "invocations", "unknown_cost_invocations",
               "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens"]


def cost_window(report: dict) -> str:
    if report["since"] is None and report["until"] is None:
        span = "all time"
    else:
        span = f"{report['since'] or 'the beginning'} → {report['until'] or 'now'}"
    return f"window: {span} (periods and times in {report['tz']})"


def cost_text(report: dict, width: int | None = None) -> str:
    """A table of groups with a TOTAL line; unpriced work shown as a lower bound."""
    by = report["by"]
    head = [f"cost by {by}" if by else "cost", cost_window(report)]
    if report.get("homes"):
        head.append("homes: " + ", ".join(safe(h) for h in report["homes"]))
    rows = [*report["rows"], {"key": "TOTAL", **report["total"]}]
    body = [[safe(r["key"]), grouped_money(money(r["cost_nano_usd"], r["unknown_cost_invocations"])),
             grouped(r["invocations"]), grouped(r["unknown_cost_invocations"]), grouped_tokens(r)] for r in rows]
    label = (by or "").upper() or "GROUP"
    table_text = fitted_table([label, "COST", "INVOCATIONS", "UNPRICED", "TOKENS(I/C/O/R)"], body,
                              right={1, 2, 3, 4}, width=width, steps=(("drop", 4), ("drop", 3), ("cut", 0, 10)))
    notes = []
    if not report["rows"] and by:
        notes.append(empty_window_note(report))
    if report["total"]["unknown_cost_invocations"]:
        notes.append("≥ marks a lower bound: unpriced invocations (cost_unknown, e.g. Codex) are not in the sum")
    return "\n".join([*head, "", table_text, *notes])


def cost_csv(report: dict) -> str:
    """CSV of the groups, then a final row with key TOTAL."""
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["key", *COST_FIELDS])
    for row in [*report["rows"], {"key": "TOTAL", **report["total"]}]:
        writer.writerow([row["key"], *(row[f] for f in COST_FIELDS)])
    return out.getvalue()


def _section(title: str, lines: list[str], empty: str) -> list[str]:
    return [f"\n{title}", *(lines or [f"  {empty}"])]


def audit_text(report: dict) -> str:
    out = ["audit " + (f"since {report['since']}" if report["since"] else "of all runs")]
    prov = report["provenance"]
    mix = ", ".join(f"{k} {v}" for k, v in prov["mix"].items())
    out += _section(f"PASS PROVENANCE ({prov['passes']} passes): {mix}",
                    [f"  {r['run_id']}  {safe(r['graph'] or '-')}: {r['passes']} pass(es), all self-reported "
                     f"({r['self_reported']}) or exit-only ({r['exit_only']})" for r in prov["runs_all_unverified"]],
                    "no run has only self-reported/exit-only passes")
    fails = report["failures"]
    out += _section("FAILS JUDGED (engine's judged field)",
                    [f"  {f['run_id']}  {safe(f['node_id'])}: {safe(f['detail'] or '')[:100]}"
                     + ("  (the detail reads like a machinery failure)" if f["ours_likely_machinery"] else "")
                     for f in fails["judged"]], "none")
    out += _section("FAILS BY MACHINERY (judged absent)",
                    [f"  {f['run_id']}  {safe(f['node_id'])}: {safe(f['detail'] or '')[:100]}"
                     for f in fails["machinery"]], "none")
    budget = report["budget"]
    out += _section("BUDGET OVERRUNS",
                    [f"  {b['run_id']}  {safe(b['node_id'])}: post-hoc budget FAIL (artifact on disk)"
                     for b in budget["budget_overrun"]]
                    + [f"  {b['run_id']}  {safe(b['node_id'])}: spent {money(b['cost_nano_usd'])} of a "
                       f"{money(b['budget_nano_usd'])} budget" for b in budget["spend_over_budget"]], "none")
    out += _section("ABANDONED NOW", [f"  {safe(r['hint'])}" for r in report["abandoned"]], "none")
    paused = report["paused"]
    out += _section("PAUSED", [f"  [{kind}] {safe(p['hint'])}" for kind in ("gate", "session_limit", "other")
                               for p in paused[kind]], "none")
    out += _section("RECONCILIATION FINDINGS",
                    [f"  {f['run_id']}  {f['kind']}: {safe(f['detail'])}" for f in report["findings"]], "none")
    out += _section("INPUT PROBLEMS",
                    [f"  {safe(p['path'])} at byte {p['byte_offset']}: {safe(p['reason'])}"
                     for p in report["problems"]], "none")
    ev = report["build_evidence"]
    counts = ", ".join(f"{k} {v}" for k, v in ev["counts"].items())
    out += _section(f"BUILD EVIDENCE (auto runs): {counts} — declared and disclosed are never summed",
                    [f"  {r['run_id']}  {r['answer']}" + (f" by {safe(r['declared_by'])}" if r["declared_by"] else "")
                     for r in ev["runs"]], "no auto runs")
    unknown = report["unknown_cost"]
    out += _section(f"UNPRICED INVOCATIONS: {unknown['total']}; attempts paid for but recorded nowhere: "
                    f"{unknown['unrecorded_attempts']}",
                    [f"  {safe(k)}: {v}" for k, v in unknown["by_runtime"].items()], "none")
    verdict = ("NEEDS ATTENTION: " + "; ".join(report["attention"])) if report["needs_attention"] \
        else "nothing needs attention"
    out.append(f"\n{verdict}")
    return "\n".join(out)


def sql_text(result: dict) -> str:
    if not result["columns"]:
        return "(the statement returned no columns)"
    rows = [["NULL" if row[c] is None else safe(row[c]) for c in result["columns"]] for row in result["rows"]]
    return table(result["columns"], rows) + f"\n({len(rows)} row(s))"


def sql_csv(result: dict) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result["columns"])
    for row in result["rows"]:
        writer.writerow(["" if row[c] is None else row[c] for c in result["columns"]])
    return out.getvalue()


def saved_queries_text(queries: list) -> str:
    if not queries:
        return "no saved queries"
    out = []
    for q in queries:
        out.append(f"{q.name}\n" + "\n".join(f"    {line}" if line else "" for line in q.header))
    return "\n\n".join(out)


def empty_window_note(report: dict) -> str:
    """Why a window can be empty: --until is exclusive."""
    if report.get("until"):
        return "no charges in this window (--until is exclusive: the window is [since, until))"
    return "no charges in this window"


def _param_usage(query) -> str:
    return " ".join(f"--param {p.name}=…" if p.default is None else f"[{p.name}]" for p in query.params)


def saved_queries_list(queries: list) -> str:
    """One line per saved query: name, one-line summary, parameters."""
    if not queries:
        return "no saved queries"
    width = max(len(q.name) for q in queries)
    lines = []
    for q in queries:
        summary = safe(q.one_line)
        if q.shadowed:
            summary = f"(yours, not used: a shipped query has this name — rename {safe(q.path)})"
        elif q.path:
            summary = f"{summary} (yours)"
        params = _param_usage(q)
        lines.append(f"{safe(q.name).ljust(width)}  {summary}" + (f"  {params}" if params else ""))
    lines.append("\n[name] = optional (--param name=VALUE). Details: omg-ledger query NAME --help")
    return "\n".join(lines)


def saved_query_detail(query) -> str:
    """Everything a saved query's header says, its parameters and where it lives."""
    out = [f"{safe(query.name)} — {safe(query.one_line)}"]
    for line in query.header[1:]:
        if line.startswith(":") or (not line and not out[-1]):
            continue  # parameters are listed below; one blank line at a time
        out.append(f"  {safe(line)}" if line else "")
    while out and not out[-1]:
        out.pop()
    out.append("\nParameters:" if query.params else "\nParameters: none")
    for p in query.params:
        default = "required" if p.default is None else f"default {p.default!r}"
        out.append(f"  --param {p.name}=VALUE  {safe(p.description)} ({default})")
    out.append(f"\nFile: {safe(query.path) if query.path else 'shipped with omg-ledger'}")
    out.append(f"Run: omg-ledger query {safe(query.name)}" + "".join(
        f" --param {p.name}=…" for p in query.params if p.default is None))
    return "\n".join(out)


def plans_table(rows: list[dict]) -> str:
    if not rows:
        return "no plan previews in the ledger (they are indexed from <home>/plans/ by `omg-ledger sync`)"
    body = [[r["plan_id"] + (" (gone)" if r["gone"] else ""), r["graph"] or "-", "yes" if r["refused"] else "no",
             r["home"]] for r in rows]
    refused = sum(r["refused"] for r in rows)
    return (table(["PLAN", "GRAPH", "REFUSED", "HOME"], body)
            + f"\n{len(rows)} plan preview(s), {refused} refused; plan previews are paid for but are not runs")


def legs_line(legs: list[dict]) -> str:
    """The legs in one readable line: "legs: 1 initial failed, 2 retry passed"."""
    if not legs:
        return "legs: none"
    parts = [f"{leg['ordinal']} {leg['kind']} "
             + (leg["outcome"] or ("open" if leg["is_open"] else leg["closed_by"] or "-")) for leg in legs]
    return "legs: " + ", ".join(safe(p) for p in parts)


# -- terminal: width, numbers, colour ---------------------------------------------------
# Fitting and colour apply only to a terminal (or an explicit COLUMNS): a pipe or a file
# gets every column in full and no escape sequences.

_SGR = {"PASS": "32", "FAIL": "31", "ABANDONED": "1;31", "PAUSED": "33", "RUNNING": "36", "PLANNING": "36",
        "NOT-KNOWN-YET": "2"}
ELLIPSIS = "…"


def terminal_width(stream) -> int | None:
    """COLUMNS when set, else the terminal's width; None for a pipe (nothing is cut)."""
    import os

    value = os.environ.get("COLUMNS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        pass
    return None


def use_colour(stream) -> bool:
    """Only on a terminal, never with NO_COLOR set (no-color.org) or TERM=dumb."""
    import os

    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return bool(stream.isatty())
    except (ValueError, AttributeError):
        return False


def terminal_options(stream) -> dict:
    return {"width": terminal_width(stream), "colour": use_colour(stream)}


def display_width(text: str) -> int:
    """Columns the terminal gives `text`: wide (CJK, emoji) characters take two,
    combining marks none."""
    if text.isascii():
        return len(text)
    import unicodedata

    width = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return width


def ellipsize(text: str, width: int) -> str:
    """`text` cut to `width` terminal columns, the cut marked with an ellipsis."""
    if display_width(text) <= width:
        return text
    if width <= 0:
        return ""
    out, used = [], 0
    for ch in text:
        w = display_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + ELLIPSIS


def grouped(number: int | None) -> str:
    """An integer with thousands separators: 1,234,567."""
    return "-" if number is None else f"{number:,}"


def grouped_money(text: str) -> str:
    """money() text with thousands separators in its dollar amounts: $12,345.6789."""
    return re.sub(r"\$(\d{4,})", lambda m: "$" + f"{int(m.group(1)):,}", text)


def grouped_tokens(row: dict) -> str:
    values = [row.get(k) or 0 for k in ("input_tokens", "cached_input_tokens", "output_tokens",
                                        "reasoning_output_tokens")]
    return "-" if not any(values) else "/".join(f"{v:,}" for v in values)


def fitted_table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset(), width: int | None = None,
                 steps: tuple[tuple, ...] = (), styles: dict | None = None) -> str:
    """A table that fits `width` columns (None: no fitting). `steps`, in order, until it
    fits: ("drop", i) removes column i; ("cut", i, floor) ellipsizes column i down to
    `floor` columns (at least its header). `styles` maps a column to a function giving a
    cell's SGR code (colour), applied outside the padding so widths stay right."""
    rows = [[safe(cell) for cell in row] for row in rows]
    keep = list(range(len(headers)))
    widths = {i: max([display_width(headers[i]), *(display_width(r[i]) for r in rows)]) for i in keep}

    def total() -> int:
        return sum(widths[i] for i in keep) + 2 * (len(keep) - 1)

    for step in steps if width else ():
        over = total() - width
        if over <= 0:
            break
        i = step[1]
        if i not in keep:
            continue
        if step[0] == "drop" and len(keep) > 1:
            keep.remove(i)
        elif step[0] == "cut":
            floor = min(widths[i], max(display_width(headers[i]), step[2]))
            widths[i] -= min(over, widths[i] - floor)

    def cell(i: int, text: str, header: bool = False) -> str:
        text = ellipsize(text, widths[i])
        pad = " " * (widths[i] - display_width(text))
        code = None if header or not styles or i not in styles else styles[i](text)
        shown = f"\x1b[{code}m{text}\x1b[0m" if code else text
        return pad + shown if i in right else shown + pad

    def line(cells: list[str], header: bool = False) -> str:
        return "  ".join(cell(i, cells[i], header) for i in keep).rstrip()

    return "\n".join([line(headers, True), "  ".join("-" * widths[i] for i in keep),
                      *(line(r) for r in rows)])


def status_style(text: str) -> str | None:
    return _SGR.get(text.split(" ", 1)[0])


def wrapped(text: str, width: int | None, indent: str = "  ") -> str:
    """A long note wrapped to the terminal, continuation lines indented under it."""
    if not width or display_width(text) <= width:
        return text
    import textwrap

    return textwrap.fill(text, width=width, subsequent_indent=indent, break_on_hyphens=False)


def attention(text: str, colour: bool) -> str:
    return f"\x1b[1;31m{text}\x1b[0m" if colour else text


def colour_verdicts(text: str) -> str:
    """Audit text with its NEEDS ATTENTION verdict in bold red (for a terminal)."""
    return "\n".join(attention(line, True) if line.startswith("NEEDS ATTENTION") else line
                     for line in text.split("\n"))
