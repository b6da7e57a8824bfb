"""The HTML report: one self-contained file (inline CSS, inline SVG, no script, nothing
fetched: a Content-Security-Policy of default-src 'none' says so to the browser).

Every string that came from a run directory or the ledger goes through :func:`esc`.
Figures carry their exact value in ``data-nano-usd`` / ``data-count`` attributes, so a
test (or a script) reads the same numbers a person sees.
"""

from __future__ import annotations

from html import escape

from .render import inert, limit_places, limit_status, money, names_nothing_note, undated_note
from .reports.cost import UNDATED
from .units import format_usd

PALETTE = ("#c96442", "#10a37f", "#6b7cff", "#b58900", "#8a8a8a", "#d33682")
# A name from a run file may be one long word: it wraps anywhere (td, li, legend) rather
# than push the figures beside it off the page; a figure (td.n) wraps only at its spaces.
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#1d1d1f;
padding:0 1rem}
h1{font-size:1.5rem;margin:0 0 .25rem}h2{font-size:1.1rem;margin:2rem 0 .5rem;border-bottom:1px solid #ddd}
.muted{color:#666}.breach{background:#fde8e8;border-left:4px solid #c0392b;padding:.4rem .8rem;margin:.3rem 0;
font-weight:600}
table{border-collapse:collapse;margin:.5rem 0}th,td{padding:.2rem .6rem;text-align:left;border-bottom:1px solid #eee;
vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
td,li,.legend span{overflow-wrap:anywhere}td.n{overflow-wrap:normal}
dl.totals{display:grid;grid-template-columns:repeat(4,1fr);gap:.5rem 1.5rem;margin:1rem 0}
dl.totals dt{color:#666;font-size:.85rem}dl.totals dd{margin:0;font-size:1.3rem;font-weight:600}
.bar{display:inline-block;height:.7rem;background:#c96442;vertical-align:middle}
.legend span{display:inline-block;margin-right:1rem}.swatch{display:inline-block;width:.8rem;height:.8rem;
margin-right:.3rem;vertical-align:middle}
code{font-size:.9em}
"""


def esc(value: object) -> str:
    """Text for the page: markup escaped, and every control, bidi and separator character a
    visible escape (render.inert), so a run file's text can neither break the document nor
    turn the line it stands in around (an unterminated U+202E reverses what follows)."""
    return escape(inert(value), quote=True)


def _synced_text(synced: dict) -> str:
    """Which syncs the figures come from, in the page's zone with its offset (a page mailed
    on is read later, elsewhere); the attributes hold the instants as stored (UTC)."""
    if synced["oldest"] is None:
        return '<span id="synced">no sync completed yet</span>'
    when = (f'ledger synced {esc(synced["newest_shown"])}' if synced["oldest"] == synced["newest"] else
            f'homes synced {esc(synced["oldest_shown"])} to {esc(synced["newest_shown"])}')
    never = f' ({synced["never_synced"]} home(s) never)' if synced["never_synced"] else ""
    return (f'<span id="synced" data-oldest="{esc(synced["oldest"])}" data-newest="{esc(synced["newest"])}">'
            f'{when}{never}</span>')


def _money_cell(row: dict, cls: str = "n") -> str:
    return (f'<td class="{cls}" data-nano-usd="{int(row["cost_nano_usd"])}" '
            f'data-unpriced="{int(row["unknown_cost_invocations"])}">'
            f'{esc(money(row["cost_nano_usd"], row["unknown_cost_invocations"]))}</td>')


def _estimate_cell(row: dict) -> str:
    nanos = int(row.get("estimated_nano_usd") or 0)
    shown = f"~{format_usd(nanos)}" if nanos or row.get("unknown_cost_invocations") else "-"
    return f'<td class="n" data-estimated-nano-usd="{nanos}">{esc(shown)}</td>'


def _share(part: int, whole: int) -> str:
    """A whole percentage that never reads as none or all when it is neither."""
    if not part or part == whole:
        return "100%" if part else "0%"
    percent = round(100 * part / whole)
    return "<1%" if percent == 0 else ">99%" if percent == 100 else f"{percent}%"


def _colors(runtimes: list[str]) -> dict[str, str]:
    known = {"claude": PALETTE[0], "codex": PALETTE[1]}
    others = iter(PALETTE[2:] * (len(runtimes) // 4 + 1))
    return {name: known.get(name) or next(others) for name in runtimes}


def _day_chart(days: list[dict], colors: dict[str, str], with_estimate: bool) -> str:
    if not days:
        return '<p class="muted">no spend in this window</p>'
    width, height, left, bottom = 1000, 260, 60, 40
    top = max(sum(c["cost_nano_usd"] + c.get("estimated_nano_usd", 0) for c in d["runtimes"].values())
              for d in days) or 1
    slot = (width - left) / len(days)
    bar = max(2.0, min(60.0, slot * 0.7))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="spend per day" '
             f'viewBox="0 0 {width} {height + bottom}" width="100%">', "<defs>"]
    for i, (_name, color) in enumerate(colors.items()):
        parts.append(f'<pattern id="hatch{i}" width="6" height="6" patternUnits="userSpaceOnUse" '
                     f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/>'
                     f'<line x1="0" y1="0" x2="0" y2="6" stroke="{color}" stroke-width="3"/></pattern>')
    parts.append("</defs>")
    parts.append(f'<line x1="{left}" y1="{height}" x2="{width}" y2="{height}" stroke="#999"/>')
    # Cents, or the page's four decimals where cents would read a tallest bar as $0.00.
    top_text = format_usd(top, 2 if top >= 10**9 else 4)
    parts.append(f'<text x="{left - 6}" y="12" text-anchor="end" font-size="11">{esc(top_text)}</text>')
    parts.append(f'<text x="{left - 6}" y="{height}" text-anchor="end" font-size="11">$0</text>')
    index = {name: i for i, name in enumerate(colors)}
    for n, day in enumerate(days):
        x = left + n * slot + (slot - bar) / 2
        y = float(height)
        for runtime, cell in day["runtimes"].items():
            for part, nanos in (("known", cell["cost_nano_usd"]), ("estimated", cell.get("estimated_nano_usd", 0))):
                if not nanos:
                    continue
                h = (height - 20) * nanos / top
                y -= h
                fill = colors[runtime] if part == "known" else f"url(#hatch{index[runtime]})"
                parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" fill="{fill}" '
                             f'stroke="{colors[runtime]}" data-day="{esc(day["day"])}" '
                             f'data-runtime="{esc(runtime)}" data-part="{part}" data-nano-usd="{int(nanos)}">'
                             f'<title>{esc(day["day"])} {esc(runtime)} {part}: '
                             f'{"~" if part == "estimated" else ""}{esc(format_usd(nanos))}</title></rect>')
        if len(days) <= 31 or n % max(1, len(days) // 15) == 0:
            label = day["day"] if day["day"] == UNDATED else day["day"][5:]  # a date without its year
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{height + 16}" text-anchor="middle" font-size="10">'
                         f'{esc(label)}</text>')
    parts.append("</svg>")
    legend = "".join(f'<span><i class="swatch" style="background:{c}"></i>{esc(name)}</span>'
                     for name, c in colors.items())
    if with_estimate:
        legend += '<span><i class="swatch" style="background:repeating-linear-gradient(45deg,#888 0 3px,#fff 3px 6px)">' \
                  "</i>estimated (hatched; not known spend)</span>"
    return "".join(parts) + f'<p class="legend">{legend}</p>'


def _day_table(days: list[dict], with_estimate: bool) -> str:
    head = "<tr><th>day</th><th>runtime</th><th class=n>known</th><th class=n>invocations</th>" \
           + ("<th class=n>estimate</th>" if with_estimate else "") + "</tr>"
    rows = []
    for day in days:
        for runtime, cell in day["runtimes"].items():
            rows.append(f'<tr data-day="{esc(day["day"])}" data-runtime="{esc(runtime)}"><td>{esc(day["day"])}</td>'
                        f"<td>{esc(runtime)}</td>{_money_cell(cell)}"
                        f'<td class="n" data-count="{cell["invocations"]}">{cell["invocations"]}</td>'
                        + (_estimate_cell(cell) if with_estimate else "") + "</tr>")
    return f'<details><summary>the numbers</summary><table id="spend-by-day">{head}{"".join(rows)}</table></details>'


def _ranked(table_id: str, title: str, rows: list[dict], with_estimate: bool) -> str:
    if not rows:
        return f"<h2>{esc(title)}</h2><p class=muted>none</p>"
    top = max(r["cost_nano_usd"] for r in rows) or 1
    body = []
    for r in rows:
        width = 200 * r["cost_nano_usd"] / top
        body.append(f'<tr data-key="{esc(r["key"])}"><td><code>{esc(r["key"])}</code></td>{_money_cell(r)}'
                    f'<td class="n" data-count="{r["invocations"]}">{r["invocations"]}</td>'
                    + (_estimate_cell(r) if with_estimate else "")
                    + f'<td><span class="bar" style="width:{width:.0f}px"></span></td></tr>')
    head = "<tr><th>key</th><th class=n>known spend</th><th class=n>invocations</th>" \
           + ("<th class=n>estimate</th>" if with_estimate else "") + "<th></th></tr>"
    return f'<h2>{esc(title)}</h2><table id="{table_id}">{head}{"".join(body)}</table>'


def _status(status: dict[str, int]) -> str:
    total = sum(status.values())
    if not total:
        return "<h2>Runs by status now</h2><p class=muted>no runs in this window</p>"
    colors = {"PASS": "#2e9d5b", "FAIL": "#c0392b", "ABANDONED": "#7f1d1d", "PAUSED": "#b58900",
              "RUNNING": "#2b6cb0", "PLANNING": "#6b7cff", "NOT-KNOWN-YET": "#999"}
    x, parts = 0.0, ['<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000 30" width="100%" role="img" '
                     'aria-label="status mix">']
    for name, count in sorted(status.items(), key=lambda kv: -kv[1]):
        w = 1000 * count / total
        parts.append(f'<rect x="{x:.1f}" y="0" width="{w:.1f}" height="30" fill="{colors.get(name, "#999")}">'
                     f"<title>{esc(name)}: {count}</title></rect>")
        x += w
    parts.append("</svg>")
    rows = "".join(f'<tr data-status="{esc(name)}"><td><i class="swatch" style="background:{colors.get(name, "#999")}">'
                   f'</i>{esc(name)}</td><td class="n" data-count="{count}">{count}</td></tr>'
                   for name, count in sorted(status.items(), key=lambda kv: -kv[1]))
    return f'<h2>Runs by status now</h2>{"".join(parts)}<table id="status">{rows}</table>'


def _list(title: str, table_id: str, items: list[str], empty: str) -> str:
    if not items:
        return f"<h2>{esc(title)}</h2><p class=muted>{esc(empty)}</p>"
    return f'<h2>{esc(title)}</h2><ul id="{table_id}">' + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def _limits(limits: dict | None) -> str:
    if not limits:
        return '<h2>Spend limits</h2><p class=muted>no limits set (--limit, or [limits] in ' \
               "config.toml in omg-ledger's config directory)</p>"

    def row(i: dict) -> str:
        places = limit_places(i)
        return (f'<tr data-limit="{esc(i["limit"])}"><td><code>{esc(i["limit"])}</code></td>'
                f'<td>{esc(i["period_start"][:10])} ({esc(i["period"])})</td>'
                f'<td class="n" data-nano-usd="{i["spent_nano_usd"]}">{esc(format_usd(i["spent_nano_usd"], places))}</td>'
                f'<td class="n" data-count="{i["unpriced_invocations"]}">{i["unpriced_invocations"]}</td>'
                + (f'<td class="n">~{esc(format_usd(i["estimated_nano_usd"], places))}</td>' if limits["estimate"] else "")
                + f'<td class="n">{esc(format_usd(i["limit_nano_usd"], places))}</td>'
                f'<td>{esc(limit_status(i))}</td></tr>')

    rows = "".join(row(i) for i in limits["limits"])
    head = "<tr><th>limit</th><th>period</th><th class=n>known spend</th><th class=n>unpriced</th>" \
           + ("<th class=n>estimate</th>" if limits["estimate"] else "") + "<th class=n>limit</th><th></th></tr>"
    # What the `limits` table says under it: spend no period holds, and names nothing was charged to.
    notes = []
    outside = limits.get("undated_outside_periods")
    if outside and outside["invocations"]:
        notes.append(undated_note(outside, "period, so in no limit"))
    notes += [names_nothing_note(i) for i in limits["limits"] if i.get("names_nothing_charged")]
    return f'<h2>Spend limits <span class="muted">at {esc(limits["at"])}</span></h2>' \
           f'<table id="limits">{head}{rows}</table>' + "".join(f'<p class="muted">{esc(n)}</p>' for n in notes)


def render(data: dict) -> str:
    total = data["total"]
    with_estimate = data["price_book"] is not None
    runtimes = sorted({rt for day in data["days"] for rt in day["runtimes"]})
    colors = _colors(runtimes)
    window = "all time" if data["since"] is None and data["until"] is None else \
        f'{data["since"] or "the beginning"} → {data["until"] or "now"}'
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">",
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>omg-ledger report — {esc(window)}</title><style>{CSS}</style></head><body>"]
    for line in (data["limits"] or {}).get("breaches", []):
        out.append(f'<p class="breach">{esc(line)}</p>')
    out.append(f'<h1>omg-ledger report</h1><p class="muted">window: <span id="window">{esc(window)}</span> '
               f'(periods and times in {esc(data["tz"])}) · generated {esc(data["generated_at"])} · '
               f'{_synced_text(data["synced"])}</p>')
    out.append('<dl class="totals">'
               f'<div><dt>known spend</dt><dd id="known" data-nano-usd="{total["cost_nano_usd"]}">'
               f'{esc(money(total["cost_nano_usd"], total["unknown_cost_invocations"]))}</dd></div>'
               f'<div><dt>invocations</dt><dd id="invocations" data-count="{total["invocations"]}">'
               f'{total["invocations"]}</dd></div>'
               f'<div><dt>unpriced invocations</dt><dd id="unpriced" data-count="{total["unknown_cost_invocations"]}">'
               f'{total["unknown_cost_invocations"]} ({_share(total["unknown_cost_invocations"], total["invocations"])})'
               '</dd></div>')
    if with_estimate:
        out.append(f'<div><dt>estimate for unpriced work</dt><dd id="estimated" '
                   f'data-nano-usd="{total["estimated_nano_usd"]}">~{esc(format_usd(total["estimated_nano_usd"]))}'
                   f' <span class="muted">({total["estimated_invocations"]} of '
                   f'{total["estimated_invocations"] + total["unestimated_invocations"]})</span></dd></div>')
    out.append("</dl>")
    outside = data["undated_outside_window"]
    if outside and outside["invocations"]:  # no spend left out unsaid, as under `cost`'s total
        out.append(f'<p class="muted" id="undated" data-nano-usd="{outside["cost_nano_usd"]}" '
                   f'data-count="{outside["invocations"]}">{esc(undated_note(outside))}</p>')
    if with_estimate:
        book = data["price_book"]
        models = "; ".join(f"{esc(n)}: {esc(r['model'])} from {esc(r['valid_from'])}" for n, r in book["runtimes"].items())
        out.append(f'<p class="muted">Estimates use the price book <code>{esc(book["path"])}</code> ({models}). '
                   "The stream records no model name, so a price is per runtime. Estimates are never known spend.</p>")
    out.append("<h2>Spend per day, by runtime</h2>")
    out.append(_day_chart(data["days"], colors, with_estimate))
    out.append(_day_table(data["days"], with_estimate))
    out.append(_ranked("runtimes", "Spend by runtime", data["runtimes"], with_estimate))
    out.append(_ranked("graphs", "Top graphs by known spend", data["graphs"], with_estimate))
    out.append(_ranked("nodes", "Top nodes by known spend", data["nodes"], with_estimate))
    out.append(_status(data["status"]))
    redone = data["redone"]
    out.append('<h2>Redone work</h2><table id="redone"><tr><th>cause</th><th class=n>known spend</th>'
               "<th class=n>invocations</th></tr>"
               + "".join(f'<tr data-key="{cause}"><td>{label}</td>{_money_cell(redone[cause])}'
                         f'<td class="n" data-count="{redone[cause]["invocations"]}">{redone[cause]["invocations"]}</td>'
                         "</tr>" for cause, label in (("feedback", "feedback rounds (re-run in the same leg)"),
                                                      ("retry", "failed, then run again in a later leg")))
               + f'</table><p>Attempts paid for but recorded nowhere (plain retries, killed calls): '
               f'<strong id="unrecorded" data-count="{redone["unrecorded_attempts"]}">{redone["unrecorded_attempts"]}'
               "</strong></p>")
    out.append(_list("ABANDONED runs now", "abandoned",
                     [f"<code>{esc(r['run_id'])}</code> {esc(r['graph'] or '-')}: {esc(r['hint'])}"
                      for r in data["abandoned"]], "none"))
    out.append(_list("PAUSED runs", "paused",
                     [f"<code>{esc(r['run_id'])}</code> {esc(r['graph'] or '-')}: {esc(r['hint'])}"
                      for r in data["paused"]], "none"))
    out.append(_list("Open input problems", "problems",
                     [f"<code>{esc(p['path'])}</code> at byte {esc(p['byte_offset'])}: {esc(p['reason'])}"
                      for p in data["problems"]], "none"))
    out.append(_limits(data["limits"]))
    out.append("</body></html>\n")
    return "".join(out)
