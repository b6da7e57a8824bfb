"""Plain-text rendering for the terminal: tables, money, a progress bar.

Text from a run directory is kept verbatim in the ledger but never interpreted on
output. Two functions make it inert, and cli.py applies them at the output boundary:

* :func:`inert` (and :func:`safe`, the same for one field) for text: C0 and C1
  controls, DEL, bidi overrides, isolates and marks, U+2028/U+2029 are shown as
  visible escapes (``\\x1b``, ``\\u202e``), so no escape sequence, line spoofing or
  right-to-left reordering passes through.
* :func:`csv_cell` for CSV: the same escapes, and a text cell a spreadsheet would
  take for a formula (leading ``=``, ``+``, ``-``, ``@``) gets a leading ``'``.

``--json`` output is exact (programs read it) and inert too: :func:`json_inert`
writes those characters as JSON ``\\u`` escapes, which decode to the same value.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from .units import format_usd, places_showing_above

if TYPE_CHECKING:
    from datetime import tzinfo

# What a terminal acts on instead of showing: C0 (tab and newline too, in a field),
# DEL, C1, the bidi controls, and the Unicode line and paragraph separators.
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f\u2028\u2029{_BIDI}]")
_UNSAFE_KEEP_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029{_BIDI}]")
# Only non-ASCII ones: inside JSON text the C0 controls are already \u escapes.
_UNSAFE_IN_JSON = re.compile(f"[\x7f-\x9f\u2028\u2029{_BIDI}]")
_FORMULA_START = ("=", "+", "-", "@")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: object, keep_newlines: bool = False) -> str:
    """`text` as a terminal can only display it: every control, bidi and separator
    character becomes a visible escape. `keep_newlines` keeps line feeds, for a whole
    rendered report whose fields were already made inert one by one."""
    if text is None:
        return ""
    text = str(text)
    if text.isascii() and text.isprintable():  # ASCII's unprintables are exactly its C0 controls and DEL
        return text
    return (_UNSAFE_KEEP_NEWLINE if keep_newlines else _UNSAFE).sub(_escape, text)


def safe(text: object) -> str:
    """One field of stored text, inert: newlines and tabs escaped too."""
    return inert(text)


def csv_cell(value: object) -> object:
    """A CSV cell that a spreadsheet shows and never evaluates.

    Numbers stay numbers (money is never negative; a number is written as a number,
    unprefixed). Text is made inert; text starting with ``=``, ``+``, ``-`` or ``@``
    (a formula to Excel, LibreOffice, Sheets) gets a leading ``'``, as OWASP advises,
    so a text "-5" is written '-5 while the number -5 stays -5. A leading tab or CR
    is already an escape (``\\x09``) by then.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return value
    text = inert(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def json_inert(text: str) -> str:
    """Serialized JSON with C1, DEL, bidi and U+2028/U+2029 written as \\u escapes.

    Outside strings JSON is ASCII, so each replacement is inside a string and the
    document decodes to exactly the same value.
    """
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _UNSAFE_IN_JSON.search(text) else text


def json_inert_utf8(data: bytes) -> bytes:
    """json_inert for JSON serialized as UTF-8. Only DEL and non-ASCII characters can
    need an escape, so ASCII without DEL (nearly every listing row) is returned as it is."""
    if data.isascii() and 0x7F not in data:  # an int: memchr, where b"\x7f" is a substring search
        return data
    return json_inert(data.decode()).encode()


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
    widths = [display_width(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], display_width(cell))

    def line(cells: list[str]) -> str:
        # Padded by terminal columns, not characters: a CJK or emoji name takes two a character.
        pads = [" " * (widths[i] - display_width(c)) for i, c in enumerate(cells)]
        return "  ".join(pad + c if i in right else c + pad for i, (c, pad) in enumerate(zip(cells, pads, strict=True))
                         ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def tokens(row: dict) -> str:
    values = [row.get(k) or 0 for k in ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")]
    return "-" if not any(values) else "/".join(str(v) for v in values)


def runs_table(rows: list[dict], width: int | None = None, colour: bool = False, zone: tzinfo | None = None,
               filtered: bool = False) -> str:
    """``filtered``: --since, --status or --home were given (so no row is not "no run")."""
    if not rows:
        if filtered:
            return "no run matches --since, --status and --home as given"
        return "no runs in the ledger yet (run `omg-ledger sync` first)"
    body = []
    for r in rows:
        nodes = "-" if r["nodes_total"] is None else f"{r['nodes_passed']}/{r['nodes_total']}"
        body.append([r["run_id"], safe(r["graph"] or "-"), nodes, grouped(r["leg_count"]),
                     money(r["cost_nano_usd"], r["unknown_cost_invocations"]), grouped_tokens(r),
                     r["status"] + (" (gone)" if r["gone"] else ""), when(r["started_at"], zone), safe(r["home"])])
    headers = ["RUN", "GRAPH", "NODES", "LEGS", "COST", "TOKENS(I/C/O/R)", "STATUS", f"STARTED ({zone or 'UTC'})",
               "HOME"]
    with_estimate = "estimated_nano_usd" in rows[0]
    if with_estimate:
        headers.append("ESTIMATE")
        for cells, r in zip(body, rows, strict=True):
            cells.append(estimate_cell(r))
    # Narrow terminals lose the home (cut first), the estimate, tokens, legs, start time
    # and nodes, then the graph name is cut and dropped, and last the run id is cut
    # (still a prefix for `show`). Money is never cut.
    text = fitted_table(headers, body, right={2, 3, 4, 5}, width=width,
                        steps=(("cut", 8, 12), ("drop", 8)) + ((("drop", 9),) if with_estimate else ()) + (
                            ("drop", 5), ("drop", 3), ("drop", 7), ("drop", 2), ("cut", 1, 12), ("drop", 1),
                            ("cut", 0, 15)),
                        styles={6: status_style} if colour else None)
    total = sum(r["cost_nano_usd"] or 0 for r in rows)
    unknown = sum(r["unknown_cost_invocations"] for r in rows)
    notes = [f"\n{wrapped(f'{len(rows)} run(s), known spend {money(total, unknown)}', width)}"]
    if with_estimate:
        sums = {k: sum(r[k] for r in rows) for k in ("estimated_nano_usd", "estimated_invocations",
                                                     "unestimated_invocations")}
        reasons: dict[str, int] = {}
        for r in rows:
            for k, v in r["unestimated_reasons"].items():
                reasons[k] = reasons.get(k, 0) + v
        notes.append("\n" + estimate_line({"cost_nano_usd": total, **sums, "unestimated_reasons": reasons}))
    notes += [f"\n{wrapped(safe(r['hint']), width)}" for r in rows if r["hint"]]
    return text + "".join(notes)


def when_local(iso_text: str) -> str:
    """An ISO 8601 instant with its offset (as a zone shows it) the way ``when`` writes
    one in --tz: ``2026-11-29 19:15:22.073+0100``."""
    from datetime import datetime

    moment = datetime.fromisoformat(iso_text)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}" + moment.strftime("%z")


def when(utc_text: str | None, zone: tzinfo | None = None) -> str:
    """One timestamp format for every table: ``2026-11-29 18:15:22.073Z`` in UTC, or the
    same in --tz with its offset at that instant (``2026-11-29 19:15:22.073+0100``)."""
    if not utc_text:
        return "-"
    if zone is None and utc_text[10:11] == "T" and utc_text[-1:] == "Z":
        return utc_text[:10] + " " + utc_text[11:23] + "Z"
    from datetime import UTC, datetime

    try:
        return when_local(datetime.fromisoformat(utc_text.replace("Z", "+00:00")).astimezone(zone or UTC).isoformat())
    except (TypeError, ValueError):
        return safe(utc_text)  # edited by hand to what is no instant: shown as stored


def _charged(charged: object, nanos: int | None, unknown_count: int, free: bool = False) -> str:
    """A node's or an execution's spend; "-" where no invocation of it was charged: a call
    the engine recorded nowhere (session-limited, killed) has no price, not $0, and a node
    that never ran none either. A gate (``free``) spawns no subprocess: $0 is its price."""
    return money(nanos, unknown_count) if charged or free else "-"


def run_detail(d: dict, zone: tzinfo | None = None) -> str:
    gone = " (gone)" if d.get("gone") else ""  # as `runs` marks it: its directory is no longer there
    out = [f"run {safe(d['run_id'])}  [{safe(d['status'])}{gone}]  home {safe(d['home'])}",
           f"graph {safe(d['graph'] or '-')}  runtime {safe(d['runtime'] or '-')}  "
           f"spend {money(d['cost_nano_usd'], d['unknown_cost_invocations'])}  "
           f"invocations {d['invocations']}  unrecorded attempts {d['unrecorded_attempts']}",
           legs_line(d["legs"])]
    if d.get("copies_in"):
        out.append(f"also copied in {', '.join(safe(label) for label in d['copies_in'])} (billed once"
                   f"{'' if d.get('billed', True) else ', from another copy'})")
    if d.get("stream_changed_since_sync"):
        out.append("its events.jsonl has changed since the last sync: the status is read from it now, "
                   "everything else here is as of that sync (`omg-ledger sync` brings it up to date)")
    elif d.get("unindexed_tail_at") is not None:
        out.append(f"its events.jsonl ends in a line without its newline (from byte {d['unindexed_tail_at']}), not "
                   f"indexed: one still being written, or one whose write was cut — once no one holds the lock the "
                   f"status reads it as the engine does; the rows here stop before it")
    if "price_book" in d:
        out.append(f"estimate for its unpriced work: {estimate_part(d)}")
        out.append(price_book_line(d["price_book"]))
    if d["hint"]:
        out.append(safe(d["hint"]))
    out.append("\nLEGS")
    out.append(table(["#", "PHASE", "KIND", "STARTED", "OUTCOME", "DETAIL"], [
        [str(leg["ordinal"]), leg["phase"], leg["kind"], when(leg["started_at"], zone),
         leg["outcome"] or ("open" if leg["is_open"] else leg["closed_by"] or "-"), shown_cut(leg["detail"], 80)]
        for leg in d["legs"]]) if d["legs"] else "  (none: the stream has said nothing)")
    gates = {n["node_id"] for n in d["nodes"] if n["node_type"] == "gate"}
    out.append("\nNODES")
    out.append(table(["NODE", "VERDICT", "STATE", "PROVENANCE", "ROUND", "RETRIES", "COST", "FILES"], [
        [safe(n["node_id"]), n["verdict"] or "-", n["state"], n["provenance"] or "-", str(n["round"] or 0),
         str(n["retries"] or 0), _charged(n["invocations"], n["cost_nano_usd"], n["unknown_cost_invocations"],
                  n["node_id"] in gates),
         ",".join(x for x, ok in (("out", n["has_artifact"]), ("failed", n["has_failed_output"])) if ok) or "-"]
        for n in d["nodes"]], right={6}) if d["nodes"] else "  (none)")
    if len({r["node_id"] for r in d["rounds"]}) < len(d["rounds"]):
        # Where a node ran more than once (feedback rounds, a retried or resumed node);
        # else each round is its node's line above.
        out.append("\nROUNDS")
        out.append(table(["NODE", "LEG", "ROUND", "STARTED", "OUTCOME", "PROVENANCE", "COST", "DETAIL"], [
            [safe(r["node_id"]), str(r["leg_ordinal"] or "-"), str(r["round"] or 0), when(r["started_at"], zone),
             r["outcome"] or "-", r["provenance"] or "-",
             _charged(r["cost_nano_usd"] is not None or r["cost_unknown"], r["cost_nano_usd"], int(r["cost_unknown"]),
                      r["node_id"] in gates),
             shown_cut(r["detail"], 60)]
            for r in d["rounds"]], right={6}))
    out.append("\nCHARGES")
    charge_rows = [
        [str(c["seq"]), c["kind"], str(c["leg_ordinal"] or "-"), safe(c["node_id"] or "-"), str(c["round"] or 0),
         when(c["at"], zone), money(c["cost_nano_usd"], 1 if c["cost_unknown"] else 0)]
        for c in d["charges"]]
    charge_headers = ["#", "KIND", "LEG", "NODE", "ROUND", "AT", "COST"]
    if "price_book" in d:
        charge_headers.append("ESTIMATE")
        for cells, c in zip(charge_rows, d["charges"], strict=True):
            if c["cost_nano_usd"] is not None:
                cells.append("-")
            elif c["estimated_nano_usd"] is None:
                cells.append(f"({c['estimate_unavailable']})")
            else:
                cells.append(f"~{format_usd(c['estimated_nano_usd'])}")
    out.append(table(charge_headers, charge_rows, right={6, 7}) if d["charges"] else "  (none)")
    if d["goal_cycle"]:
        g = d["goal_cycle"]
        out.append(f"\nGOAL cycle {g['cycle']}/{g['max_cycles']} of {g['first_run_id']}: {safe(g['text'])}")
        if g["assessed"]:
            out.append(f"  assessed: goal_met={g['goal_met']} cost {money(g['assess_cost_nano_usd'])}"
                       f"  remaining: {safe(g['remaining'] or '-')}")
    out.append("\nFINDINGS")
    out.extend(f"  {safe(f['kind'])}: {safe(f['detail'])}" for f in d["findings"]) if d["findings"] else out.append("  (none)")
    if d["problems"]:
        out.append("\nPROBLEMS")
        out.extend(f"  {safe(p['path'])} at byte {p['byte_offset']}: {safe(p['reason'])}"
                   + (f"  [resolved {safe(p['resolved_at'])}]" if p.get("resolved_at") else "") for p in d["problems"])
    return "\n".join(out)


def sync_summary(report) -> str:
    return (f"synced {report.runs_seen:,} run(s): {report.runs_changed:,} changed, {report.events_ingested:,} new "
            f"event(s), {format_size(report.bytes_read)} read, {len(report.problems):,} problem(s) in "
            f"{report.seconds:.2f}s")


def wrap(text: str, width: int) -> str:
    """``text`` broken at spaces (or inside a word longer than a line) into lines of
    fewer than ``width`` columns, so no terminal wraps it mid-word."""
    import textwrap

    return "\n".join(textwrap.wrap(text, max(1, width - 1))) or text


def format_size(count: int) -> str:
    """Bytes as a person reads them, in SI units as `ls -h --si` and most file managers
    show them: 512 B, 4.1 kB, 23.4 MB, 1.2 GB."""
    if count < 1000:
        return f"{count} B"
    value = float(count)
    for unit in ("kB", "MB", "GB", "TB", "PB"):
        value /= 1000
        if value < 999.95 or unit == "PB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """0:07, 12:34, 1:02:03."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def stderr_width() -> int:
    """The terminal's width for a line on stderr: $COLUMNS when set (as for tables),
    else the width of the terminal stderr is on, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns or 80
    except (OSError, ValueError):
        return 80


def progress_line(stage: str, done: int, total: int, elapsed: float, width: int) -> str:
    """One progress line that fits in ``width - 1`` columns (never the last column, so
    no terminal wraps it): stage, count, rate, elapsed, ETA, and a bar with what room is
    left. What does not fit is dropped from the right."""
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = format_duration((total - done) / rate) if rate > 0 and done < total else ("0:00" if done >= total else "?")
    fields = [f"{stage} {done:,}/{total:,}", f"{rate:,.1f}/s", format_duration(elapsed), f"ETA {eta}"]
    room = max(1, width - 1)
    text = " ".join(fields)
    bar_room = room - len(text) - 3  # " [" and "]"
    if bar_room >= 10:
        cells = min(bar_room, 40)
        filled = cells * done // total if total else cells
        bar = "#" * filled + "." * (cells - filled)
        return f"{fields[0]} [{bar}] {' '.join(fields[1:])}"
    while len(fields) > 1 and len(" ".join(fields)) > room:
        fields.pop()  # ETA, then elapsed, then the rate
    for shorter in (f"{done:,}/{total:,}", f"{done}/{total}"):  # the count matters more than the stage's name
        if len(fields[0]) > room:
            fields[0] = shorter
    return " ".join(fields)[:room]


class progress_bar:
    """A one-line progress bar per stage on stderr, redrawn in place (carriage return,
    then erase to the end of the line) at most 10 times a second, fitted to the width
    of the terminal at each redraw. TERM=dumb has no erase-line: there blanks cover what
    the line drawn before was longer by."""

    CLEAR_LINE = "\r\x1b[K"

    def __init__(self) -> None:
        self.last = 0.0
        self.stage: str | None = None
        # A stage's time runs from when the one before it ended (the first: from now),
        # so its first step counts in the rate.
        self.started = self.previous = time.monotonic()
        self.done = 0
        self.drawn = False
        self.drawn_width = 0  # of the line now on the screen

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        restarted = stage != self.stage or done < self.done  # a new stage, or the next home
        previous, self.previous, self.done = self.previous, now, done
        if not restarted and done != total and now - self.last < 0.1:
            return
        if restarted:
            if self.drawn:
                sys.stderr.write("\n")  # the finished stage's line stays
            if self.stage is not None:
                self.started = previous
            self.stage = stage
            self.drawn_width = 0
        self.last = now
        width = stderr_width()
        line = progress_line(stage, done, total, now - self.started, width)
        if os.environ.get("TERM") == "dumb":
            blanks = " " * (min(self.drawn_width, width - 1) - len(line))
            sys.stderr.write("\r" + line + blanks)
        else:
            sys.stderr.write(self.CLEAR_LINE + line)
        sys.stderr.flush()
        self.drawn = True
        self.drawn_width = len(line)

    def close(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")


# -- cost, audit, sql (appended) ---------------------------------------------------------

COST_FIELDS = ["cost_usd", "cost_nano_usd", "cost_is_lower_bound", "invocations", "unknown_cost_invocations",
               "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens"]
ESTIMATE_CSV_FIELDS = ["estimated_usd", "estimated_nano_usd", "estimated_invocations", "unestimated_invocations"]


def cost_window(report: dict) -> str:
    if report["since"] is None and report["until"] is None:
        span = "all time"
    else:
        span = f"{report['since'] or 'the beginning'} → {report['until'] or 'now'}"
    return safe(f"window: {span} (periods and times in {report['tz']})")


def cost_text(report: dict, width: int | None = None) -> str:
    """A table of groups with a TOTAL line; unpriced work shown as a lower bound."""
    by = report["by"]
    head = [f"cost by {by}" if by else "cost", cost_window(report)]
    if report.get("homes"):
        head.append("homes: " + ", ".join(safe(h) for h in report["homes"]))
    rows = [*report["rows"], {"key": "TOTAL", **report["total"]}]
    body = [[safe(r["key"]), money(r["cost_nano_usd"], r["unknown_cost_invocations"]),
             grouped(r["invocations"]), grouped(r["unknown_cost_invocations"]), grouped_tokens(r)] for r in rows]
    label = (by or "").upper() or "GROUP"
    headers = [label, "COST", "INVOCATIONS", "UNPRICED", "TOKENS(I/C/O/R)"]
    steps = (("drop", 4), ("drop", 3), ("cut", 0, 10))
    if "price_book" in report:
        headers.append("ESTIMATE (OF UNPRICED)")
        steps = (("drop", 5), *steps)
        for cells, r in zip(body, rows, strict=True):
            cells.append(estimate_cell(r))
    table_text = fitted_table(headers, body, right={1, 2, 3, 4}, width=width, steps=steps)
    notes = []
    if "price_book" in report:
        notes.append(estimate_line(report["total"]))
        notes.append(price_book_line(report["price_book"]))
    if not report["rows"] and by:
        notes.append(empty_window_note(report))
    if report["total"]["unknown_cost_invocations"]:
        notes.append("≥ marks a lower bound: unpriced invocations (cost_unknown, e.g. Codex) are not in the sum")
    outside = report.get("undated_outside_window")
    if outside and outside["invocations"]:
        notes.append(undated_note(outside))
    ahead = report.get("after_now_outside_window")
    if ahead and ahead["invocations"]:
        notes.append(after_now_note(ahead))
    return "\n".join([*head, "", table_text, *notes])


def after_now_note(ahead: dict) -> str:
    """The spend a window ending now leaves out: charges dated after now."""
    count = ahead["invocations"]
    return (f"not in the window: {money(ahead['cost_nano_usd'], ahead['unknown_cost_invocations'])} in {count} "
            f"charge{'s' if count != 1 else ''} dated after now (a machine's clock ahead of this one's?); "
            f"`omg-ledger cost` without --since counts them, `--by run` shows whose")


def undated_note(outside: dict, held_by: str = "window") -> str:
    """The spend no window holds: charges with no time, from runs with no stream to date them."""
    count = outside["invocations"]
    return (f"not in any {held_by}: {money(outside['cost_nano_usd'], outside['unknown_cost_invocations'])} in {count} "
            f"undated charge{'s' if count != 1 else ''} (runs with no stream to date them); "
            f"`omg-ledger cost` without --since/--until counts them, `--by run` shows whose")


def estimate_cell(row: dict) -> str:
    unpriced = row["estimated_invocations"] + row["unestimated_invocations"]
    if not unpriced:
        return "-"
    return f"~{format_usd(row['estimated_nano_usd'])} ({row['estimated_invocations']} of {unpriced})"


def estimate_line(total: dict) -> str:
    """Known spend, the estimate and what could not be estimated: three figures, never one sum."""
    return f"{format_usd(total['cost_nano_usd'])} known + {estimate_part(total)}"


def estimate_part(total: dict) -> str:
    unpriced = total["estimated_invocations"] + total["unestimated_invocations"]
    line = f"~{format_usd(total['estimated_nano_usd'])} estimated ({total['estimated_invocations']} of {unpriced} unpriced)"
    reasons = {k: v for k, v in total.get("unestimated_reasons", {}).items() if v}
    if reasons:
        line += "; not estimated: " + ", ".join(f"{v} {k}" for k, v in reasons.items())
    return line


def price_book_line(book: dict) -> str:
    runtimes = "; ".join(f"{name}: {safe(r['model'])} from {r['valid_from']}" for name, r in book["runtimes"].items())
    return f"estimates from the price book {safe(book['path'])} ({runtimes}); the stream records no model name"


MONEY_CELLS = ("cost_usd", "cost_nano_usd")


def money_cells(row: dict) -> dict:
    """A row for CSV: where no invocation has a known price, its cost is unknown — an
    empty cell, never a 0 a spreadsheet would sum."""
    if row.get("invocations") and row.get("unknown_cost_invocations") == row.get("invocations"):
        return {**row, **dict.fromkeys(MONEY_CELLS)}
    return row


def csv_rows(fields: list[str], rows, total: dict | None = None) -> str:
    """CSV with a header row: one line per row, and a TOTAL line only when ``total`` is
    given (asked for with --total), never mixed in unasked among the data rows."""
    import csv
    import io
    import itertools

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields)
    # Rows are converted as they come (the row dicts are not listed first; the CSV text
    # is still built whole).
    for row in itertools.chain(rows, [total] if total is not None else []):
        row = money_cells(row)
        writer.writerow([csv_cell(row.get(f)) for f in fields])
    return out.getvalue()


# What a --json row of a grouping carries beside its key, last in its CSV: two rows can
# show one key (a run id in two homes; graph a/b node c and graph a node b/c).
COST_ROW_FIELDS = {"run": ["home"], "node": ["graph", "node_id"], "graph": ["graph"],
                   **dict.fromkeys(("day", "week", "month"), ["start", "end"])}


def cost_csv(report: dict, with_total: bool = False) -> str:
    """CSV of the groups (the same columns as a --json row); a TOTAL row only when asked."""
    fields = ["key", *COST_FIELDS, *(ESTIMATE_CSV_FIELDS if "price_book" in report else []),
              *COST_ROW_FIELDS.get(report["by"], [])]
    return csv_rows(fields, report["rows"], {"key": "TOTAL", **report["total"]} if with_total else None)


RUN_CSV_FIELDS = ["run_id", "home", "graph", "runtime", "status", "nodes_total", "nodes_passed", "leg_count", "cost_usd",
                  "cost_nano_usd", "invocations", "unknown_cost_invocations", "unrecorded_attempts", "input_tokens",
                  "cached_input_tokens", "output_tokens", "reasoning_output_tokens", "started_at", "last_event_at",
                  "gone", "has_snapshot", "paused_for", "gate", "nodes_interrupted", "hint"]


def runs_csv(rows, with_estimate: bool = False) -> str:
    """`runs --csv`: the scalar fields of a `runs --json` row, one run a line."""
    fields = RUN_CSV_FIELDS + (ESTIMATE_CSV_FIELDS if with_estimate else [])
    return csv_rows(fields, rows)


def _section(title: str, lines: Iterable[str], empty: str) -> Iterator[str]:
    yield f"\n{title}"
    listed = False
    for line in lines:
        listed = True
        yield line
    if not listed:
        yield f"  {empty}"


def _newest_note(rows, lines: Iterable[str]) -> Iterator[str]:
    """A list that holds only its newest rows (reports.audit.Rows.listed) says so first."""
    listed = getattr(rows, "listed", None)
    if listed is not None and len(rows) > listed:
        yield (f"  the {listed} newest of {len(rows):,} (--verbose lists every one; "
               f"--json has all)")
    yield from lines


# A FAIL's detail (a check's whole output, at times) in the audit text; --json has all of it.
DETAIL_COLUMNS = 100


def audit_text(report: dict, verbose: bool = False, zone: tzinfo | None = None) -> str:
    return "\n".join(audit_lines(report, verbose, zone))


def audit_lines(report: dict, verbose: bool = False, zone: tzinfo | None = None) -> Iterator[str]:
    """The verdict line first, then spend-limit breaches, then each section, one line at
    a time (a section may be read while it is rendered: reports.audit.audit_streamed). The
    runs whose passes are all unverified are listed only when ``verbose`` (counted always).
    Times are shown in ``zone`` (--tz), as in every table; the JSON keeps them in UTC."""
    limits = report.get("limits")
    verdict = ("NEEDS ATTENTION: " + "; ".join(report["attention"])) if report["needs_attention"] \
        else "nothing needs attention"
    yield verdict  # first, for a cron mail's reader
    yield from limits["breaches"] if limits else []
    yield ("audit " + (f"since {when(report['since'], zone)}" if report["since"] else "of all runs")
           + " (ABANDONED and PAUSED runs: every one now, however old)")
    if report.get("synced_since"):
        yield from _section(f"HOMES NOT SYNCED SINCE {when(report['synced_since'], zone)} (what the ledger says of "
                            f"them may be behind)", [
            f"  {safe(h['label'])}  {safe(h['path'])}: "
            + (f"last synced {when(h['last_synced_at'], zone)}" if h["last_synced_at"] else "no sync completed")
            for h in report["stale_homes"]], "none")
    prov = report["provenance"]
    mix = ", ".join(f"{safe(k)} {v}" for k, v in prov["mix"].items())
    weak = prov["runs_all_unverified"]
    weak_lines = ((f"  {safe(r['run_id'])}  {safe(r['graph'] or '-')}: {r['passes']} pass(es), all self-reported "
                   f"({r['self_reported']}) or exit-only ({r['exit_only']})" for r in weak) if verbose
                  else [f"  {len(weak)} run(s) whose passes are all self-reported or exit-only (--verbose lists them)"]
                  if weak else [])
    yield from _section(f"PASS PROVENANCE ({prov['passes']} passes): {mix}", weak_lines,
                        "no run has only self-reported/exit-only passes")
    fails = report["failures"]
    yield from _section("FAILS JUDGED (engine's judged field)", _newest_note(fails["judged"], (
        f"  {safe(f['run_id'])}  {safe(f['node_id'])}: {shown_cut(f['detail'], DETAIL_COLUMNS)}"
        + ("  (the detail reads like a machinery failure)" if f["ours_likely_machinery"] else "")
        for f in fails["judged"])), "none")
    yield from _section("FAILS BY MACHINERY (judged absent)", _newest_note(fails["machinery"], (
        f"  {safe(f['run_id'])}  {safe(f['node_id'])}: {shown_cut(f['detail'], DETAIL_COLUMNS)}"
        for f in fails["machinery"])), "none")
    yield from _section("FAILS WITH NO JUDGED ON RECORD (state.json holds no record of the terminal)",
                        _newest_note(fails["judged_unknown"], (
                            f"  {safe(f['run_id'])}  {safe(f['node_id'])}: {shown_cut(f['detail'], DETAIL_COLUMNS)}"
                            for f in fails["judged_unknown"])), "none")
    budget = report["budget"]
    yield from _section("BUDGET OVERRUNS", [f"  {safe(b['run_id'])}  {safe(b['node_id'])}: " + "; ".join(
        ([f"the engine failed it for its budget: {shown_cut(b['detail'], DETAIL_COLUMNS)}"] if b["failed_for_budget"] else [])
        + ([f"an invocation spent {money(b['largest_invocation_nano_usd'])} of a {money(b['budget_nano_usd'])} "
            f"budget ({money(b['cost_nano_usd'])} in all)"]
           if b["spend_over_budget"] else [])) for b in budget["overruns"]], "none")
    yield from _section("ABANDONED NOW", [f"  {safe(r['hint'])}" + (
        f" Interrupted node(s): {safe(', '.join(r['interrupted_nodes']))}." if r["interrupted_nodes"] else "")
        for r in report["abandoned"]], "none")
    paused = report["paused"]
    yield from _section("PAUSED", [f"  [{kind}] {safe(p['hint'])}" for kind in ("gate", "session_limit", "other")
                                   for p in paused[kind]], "none")
    yield from _section("RECONCILIATION FINDINGS",
                        [f"  {safe(f['run_id'])}  {safe(f['kind'])}: {safe(f['detail'])}" for f in report["findings"]],
                        "none")
    yield from _section("INPUT PROBLEMS",
                        [f"  {safe(p['path'])} at byte {p['byte_offset']}: {safe(p['reason'])}"
                     for p in report["problems"]], "none")
    ev = report["build_evidence"]
    counts = ", ".join(f"{safe(k)} {v}" for k, v in ev["counts"].items())
    yield from _section(f"BUILD EVIDENCE (auto runs): {counts} — declared and disclosed are never summed",
                        [f"  {safe(r['run_id'])}  {safe(r['answer'])}"
                     + (f" by {safe(r['declared_by'])}" if r["declared_by"] else "")
                     for r in ev["runs"]], "no auto runs")
    unknown = report["unknown_cost"]
    yield from _section(f"UNPRICED INVOCATIONS: {unknown['total']}; attempts paid for but recorded nowhere: "
                        f"{unknown['unrecorded_attempts']}",
                        [f"  {safe(k)}: {v}" for k, v in unknown["by_runtime"].items()], "none")
    if "estimate" in unknown:
        yield "  " + estimate_part(unknown["estimate"])
        yield "  " + price_book_line(report["price_book"])
    if limits:
        yield "\nSPEND LIMITS"
        yield from ("  " + line for line in limits_table(limits).splitlines())


def sql_text(result: dict) -> str:
    if not result["columns"]:
        return "(the statement returned no columns)"
    rows = [["NULL" if row[c] is None else safe(row[c]) for c in result["columns"]] for row in result["rows"]]
    return table([safe(c) for c in result["columns"]], rows) + f"\n({len(rows)} row(s))"


def sql_csv(result: dict) -> str:
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([csv_cell(c) for c in result["columns"]])
    for row in result["rows"]:
        writer.writerow([csv_cell(row[c]) for c in result["columns"]])
    return out.getvalue()


# -- limits ---------------------------------------------------------------------------


def limit_places(item: dict) -> int:
    """Decimals a limit's figures are shown with: four, or as many more as an exceeded
    limit needs so that its spend never reads level with it (equal is not over)."""
    if item["exceeded"]:
        return places_showing_above(item["limit_nano_usd"], [item["spent_nano_usd"]])
    if item["breach"]:  # exceeded with the estimate
        return places_showing_above(item["limit_nano_usd"], [item["spent_nano_usd"], item["estimated_nano_usd"]])
    return 4


def limits_table(report: dict) -> str:
    """Every limit with its spend so far; the breach lines are printed before it by the caller."""
    if not report["limits"]:
        return "no spend limits set"
    headers = ["LIMIT", "PERIOD", "KNOWN SPEND", "UNPRICED"]
    if report["estimate"]:
        headers.append("ESTIMATE")
    headers += ["LIMIT USD", "STATUS"]
    body = []
    for item in report["limits"]:
        places = limit_places(item)
        cells = [safe(item["limit"]), f"{item['period_start'][:10]} ({item['period']})",
                 format_usd(item["spent_nano_usd"], places), str(item["unpriced_invocations"])]
        if report["estimate"]:
            cells.append(f"~{format_usd(item['estimated_nano_usd'], places)}")
        body.append([*cells, format_usd(item["limit_nano_usd"], places), limit_status(item)])
    right = {2, 3, 4, 5} if report["estimate"] else {2, 3, 4}
    text = (f"spend limits at {when_local(report['at'])} (periods in {report['tz']})\n"
            + table(headers, body, right=right))
    outside = report.get("undated_outside_periods")
    if outside and outside["invocations"]:
        text += "\n" + undated_note(outside, "period, so in no limit")
    for item in report["limits"]:
        if item.get("names_nothing_charged"):
            text += "\n" + names_nothing_note(item)
    return text


def limit_status(item: dict) -> str:
    return "EXCEEDED" if item["exceeded"] else "EXCEEDED with estimate" if item["breach"] else "ok"


def names_nothing_note(item: dict) -> str:
    """A limit on a name nothing was ever charged to (a typo) reads $0 and never trips: said."""
    return (f"limit {safe(item['limit'])}: no {item['scope']} {safe(item['name'])!r} was ever charged in this "
            f"ledger, so it reads $0 until one is (`omg-ledger cost --by {item['scope']}` lists the names)")


def limits_text(report: dict) -> str:
    return "\n".join([*report["breaches"], *([""] if report["breaches"] else []), limits_table(report)])


# -- cost --chart ---------------------------------------------------------------------

_EIGHTHS = " ▏▎▍▌▋▊▉"


def _bar(cells: float, unicode: bool) -> str:
    if not unicode:
        return "#" * round(cells)
    whole, eighths = divmod(round(cells * 8), 8)
    return "█" * whole + (_EIGHTHS[eighths] if eighths else "")


def cost_chart(report: dict, width: int, unicode: bool) -> str:
    """One bar per row, scaled to the largest row, fitted to `width` columns. Known spend is
    drawn solid; with --estimate the estimate follows in a lighter mark. Without UTF-8 only
    ASCII is written (# known, . estimate, >= for a lower bound)."""
    rows = report["rows"]
    ge, arrow = ("≥", "→") if unicode else (">=", "->")
    head = [f"cost by {report['by']}", cost_window(report).replace("→", arrow)]
    if not rows:
        return "\n".join([*head, "", "no charges in this window"])
    with_estimate = "price_book" in report

    def label(r: dict) -> str:
        # The same text as the table's COST cell (a row of unpriced work alone is "unknown").
        text = money(r["cost_nano_usd"], r["unknown_cost_invocations"]).replace("≥", ge)
        if with_estimate and r.get("estimated_nano_usd"):
            text += f" ~{format_usd(r['estimated_nano_usd'])}"
        return text

    keys = [safe(r["key"]) for r in rows]
    labels = [label(r) for r in rows]
    key_w, label_w = max(map(display_width, keys)), max(map(len, labels))
    if key_w + label_w + 4 + 10 > width:  # narrow terminal: shorten the keys, keep a 10-cell bar
        mark = ELLIPSIS if unicode else "~"
        key_w = distinct_cut_width(keys, max(width - label_w - 14, 6), key_w, mark)
        keys = [ellipsize(k, key_w, mark) for k in keys]
    bar_w = max(width - key_w - label_w - 4, 3)
    top = max(r["cost_nano_usd"] + (r.get("estimated_nano_usd") or 0) for r in rows) or 1
    lines = []
    for key, text, r in zip(keys, labels, rows, strict=True):
        known = bar_w * r["cost_nano_usd"] / top
        bar = _bar(known, unicode)
        if with_estimate and r.get("estimated_nano_usd"):
            extra = round(bar_w * r["estimated_nano_usd"] / top)
            bar += ("░" if unicode else ".") * max(extra, 1)
        lines.append(f"{key}{' ' * (key_w - display_width(key))}  {text.rjust(label_w)}  {bar}".rstrip())
    notes = []
    if with_estimate:
        notes.append(("░" if unicode else ".") + " estimate for unpriced work (not known spend)")
    if any(r["unknown_cost_invocations"] for r in rows):
        notes.append(f"{ge} lower bound: unpriced work is not in the bar")
    import textwrap

    wrapped = [part for text in notes for part in textwrap.wrap(text, max(width, 20))]
    return "\n".join([*head, "", *lines, *wrapped])
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


def ellipsize(text: str, width: int, mark: str = ELLIPSIS) -> str:
    """`text` cut to `width` terminal columns, the cut marked with an ellipsis (`mark`)."""
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
    return "".join(out) + mark


def shown_cut(text: str | None, width: int, mark: str = ELLIPSIS) -> str:
    """Stored text as `safe` shows it, cut to `width` terminal columns with the cut marked:
    never in the middle of an escape (half of `\\x1b` would read as other text)."""
    shown = safe(text or "")
    if display_width(shown) <= width:
        return shown
    out, used = [], 0
    for ch in str(text):
        piece = safe(ch)
        used += display_width(piece)
        if used > width - 1:
            break
        out.append(piece)
    return "".join(out) + mark


def distinct_cut_width(cells: list[str], width: int, full: int, mark: str = ELLIPSIS) -> int:
    """The least width from `width` (at most `full`) at which `cells`, ellipsized, stay
    as many different texts as they are: two run ids or graph names cut to one text would
    read as one (and a cut run id would be no prefix `show` takes)."""
    different = set(cells)
    for w in range(width, full):
        if len({ellipsize(c, w, mark) for c in different}) == len(different):
            return w
    return full


def grouped(number: int | None) -> str:
    """An integer with thousands separators: 1,234,567."""
    return "-" if number is None else f"{number:,}"


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
            widths[i] = distinct_cut_width([r[i] for r in rows], max(floor, widths[i] - over), widths[i])

    def cell(i: int, text: str, header: bool = False) -> str:
        used = display_width(text)
        if used > widths[i]:
            text = ellipsize(text, widths[i])
            used = display_width(text)
        pad = " " * (widths[i] - used)
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


def problems_text(problems: list[dict], include_resolved: bool) -> str:
    if not problems:
        return "no open input problems" if not include_resolved else "no input problems recorded"
    lines = []
    # Machines are named only where problems of several are listed (one path may be a home on each).
    several = len({p["machine"] for p in problems}) > 1
    for p in problems:
        state = "open" if p["open"] else f"resolved {safe(p['resolved_at'])}"
        where = f"{safe(p['home'])} {safe(p['run_id'])}: " if p["run_id"] else ""
        machine = f", on {safe(p['machine'] or 'a machine not recorded')}" if several else ""
        lines.append(f"[{state}] {where}{safe(p['path'])} at byte {p['byte_offset']}: {safe(p['reason'])} "
                     f"(first seen {safe(p['first_seen_at'])}, last {safe(p['last_seen_at'])}{machine})")
    return "\n".join(lines)
