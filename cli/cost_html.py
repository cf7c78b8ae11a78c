"""The cost report as ONE self-contained HTML file: inline CSS, inline SVG charts, a few lines of JS.

Why hand-written SVG: the report is mailed, attached to tickets and opened
offline, so it must not fetch anything (no CDN, no fonts, no chart library);
SVG generated here renders the same in every browser and stays readable
without JavaScript.  The script only adds conveniences (sortable tables,
legend highlighting) and marks ``<body data-report="ready">`` once it ran,
which the browser test checks.

Charts: GPU-hours over time stacked by the first grouping dimension, the top
workloads by GPU-hours, and cost (or, without prices, GPU-hours) by cluster;
then the report's table.
"""

from __future__ import annotations

import html
import math
from datetime import datetime

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#bab0ac")
OTHER_COLOUR = "#c9c9c9"
MAX_SERIES = 8  # stacks of the time chart; the rest is "other"
TOP_WORKLOADS = 10


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def number(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def _nice_max(value: float) -> float:
    """A round upper bound for an axis: the smallest m x 10^n >= value, m in 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8."""
    if value <= 0:
        return 1.0
    exponent = 10.0 ** math.floor(math.log10(value))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * exponent >= value * (1 - 1e-12):
            return m * exponent
    return 10 * exponent  # pragma: no cover


def period_label(start: datetime, end: datetime) -> str:
    if (end - start).total_seconds() >= 86400 and start.hour == 0 and start.minute == 0:
        return start.strftime("%m-%d")
    return start.strftime("%m-%d %H:%M")


def _tick_label(i: int, start: datetime, end: datetime) -> str:
    """Axis label of a period: the date for days; the time for hours, with the date at midnight and first."""
    if (end - start).total_seconds() >= 86400 or i == 0 or (start.hour == 0 and start.minute == 0):
        return period_label(start, end)
    return start.strftime("%H:%M")


def stacked_bars(periods, series: list[tuple[str, list[float]]], *, unit: str, width=1100, height=360,
                 chart_id: str = "chart-time") -> str:
    """A stacked column chart: one column per period, one stack per named series."""
    left, right, top, bottom = 70, 10, 10, 50
    plot_w, plot_h = width - left - right, height - top - bottom
    totals = [sum(values[i] for _, values in series) for i in range(len(periods))]
    y_max = _nice_max(max(totals, default=0))
    n = max(len(periods), 1)
    slot = plot_w / n
    bar_w = max(1.0, slot * 0.8)
    parts = [f'<svg class="chart" id="{esc(chart_id)}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{esc(unit)} over time">']
    for k in range(5):  # grid and y ticks
        v = y_max * k / 4
        y = top + plot_h - plot_h * k / 4
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{number(v, 0)}</text>')
    ticks = [_tick_label(i, start, end) for i, (start, end) in enumerate(periods)]
    longest = max((len(x) for x in ticks), default=1)
    every = max(1, math.ceil(n * (longest * 6.5 + 10) / plot_w))  # labels must not overlap
    for i, (start, end) in enumerate(periods):
        x = left + slot * i + (slot - bar_w) / 2
        base = top + plot_h
        for s, (name, values) in enumerate(series):
            v = values[i]
            if v <= 0:
                continue
            h = plot_h * v / y_max
            base -= h
            colour = OTHER_COLOUR if name == "other" else PALETTE[s % len(PALETTE)]
            parts.append(f'<rect class="bar" data-series="{s}" x="{x:.1f}" y="{base:.1f}" width="{bar_w:.1f}" '
                         f'height="{h:.1f}" fill="{colour}"><title>{esc(name)} {esc(period_label(start, end))}: '
                         f'{number(v)} {esc(unit)}</title></rect>')
        if i % every == 0:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{top + plot_h + 16}" text-anchor="middle" class="tick">'
                         f'{esc(ticks[i])}</text>')
    parts.append(f'<line x1="{left}" x2="{width - right}" y1="{top + plot_h}" y2="{top + plot_h}" class="axis"/>')
    parts.append(f'<text x="14" y="{top + plot_h / 2:.1f}" transform="rotate(-90 14 {top + plot_h / 2:.1f})" '
                 f'text-anchor="middle" class="tick">{esc(unit)}</text>')
    parts.append("</svg>")
    legend = ['<div class="legend">']
    for s, (name, values) in enumerate(series):
        colour = OTHER_COLOUR if name == "other" else PALETTE[s % len(PALETTE)]
        legend.append(f'<span class="key" data-series="{s}"><i style="background:{colour}"></i>{esc(name)} '
                      f'<small>{number(sum(values))}</small></span>')
    legend.append("</div>")
    return "".join(parts) + "".join(legend)


def horizontal_bars(chart_id: str, items: list[tuple[str, float]], *, unit: str, width=1100) -> str:
    """One bar per item, largest first, labelled with its value."""
    label_w, value_w, row_h, top = 380, 120, 26, 6
    height = top * 2 + row_h * max(len(items), 1)
    x_max = max((v for _, v in items), default=0) or 1.0
    plot_w = width - label_w - value_w
    parts = [f'<svg class="chart" id="{chart_id}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{esc(unit)}">']
    if not items:
        parts.append(f'<text x="10" y="{top + 16}" class="tick">nothing consumed in this window</text>')
    for i, (label, value) in enumerate(items):
        y = top + i * row_h
        w = max(1.0, plot_w * value / x_max)
        short = label if len(label) <= 56 else label[:55] + "…"
        parts.append(f'<text x="{label_w - 8}" y="{y + row_h / 2 + 4:.1f}" text-anchor="end" class="label">'
                     f'{esc(short)}</text>')
        parts.append(f'<rect class="bar" x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"><title>{esc(label)}: {number(value, 2)} {esc(unit)}'
                     f'</title></rect>')
        parts.append(f'<text x="{label_w + w + 6:.1f}" y="{y + row_h / 2 + 4:.1f}" class="tick">'
                     f'{number(value)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def table(headers: list[str], rows: list[list], *, numeric_from: int, table_id: str, footer=None) -> str:
    out = [f'<table id="{table_id}" class="sortable"><thead><tr>']
    for i, h in enumerate(headers):
        out.append(f'<th class="{"num" if i >= numeric_from else ""}">{esc(h)}</th>')
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>" + "".join(
            f'<td class="{"num" if i >= numeric_from else ""}">{esc(v)}</td>' for i, v in enumerate(row)) + "</tr>")
    out.append("</tbody>")
    if footer:
        out.append("<tfoot><tr>" + "".join(
            f'<td class="{"num" if i >= numeric_from else ""}">{esc(v)}</td>' for i, v in enumerate(footer))
                   + "</tr></tfoot>")
    out.append("</table>")
    return "".join(out)


CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px}
.meta{color:#555;margin-bottom:12px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:12px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:10px 16px;min-width:150px;background:#fafafa}
.card b{display:block;font-size:20px}
svg.chart{display:block;max-width:100%;height:auto}
svg .grid{stroke:#eee} svg .axis{stroke:#888} svg .tick{font-size:11px;fill:#555} svg .label{font-size:12px;fill:#222}
svg rect.bar{transition:opacity .15s} svg.dim rect.bar{opacity:.25} svg.dim rect.bar.hot{opacity:1}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;margin:6px 0 0 70px;font-size:12px}
.legend .key{cursor:default} .legend i{display:inline-block;width:11px;height:11px;margin-right:5px;vertical-align:-1px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{padding:4px 10px;border-bottom:1px solid #e6e6e6;text-align:left;white-space:nowrap}
th{background:#f3f3f3;cursor:pointer;user-select:none} th.num,td.num{text-align:right}
tfoot td{font-weight:600;border-top:2px solid #bbb}
.note{color:#8a5300;background:#fff6e5;border:1px solid #f0d9a8;padding:6px 10px;border-radius:4px}
"""

JS = """
(function () {
  'use strict';
  function cellValue(td) {
    var t = td.textContent.replace(/,/g, '');
    var n = parseFloat(t);
    return isNaN(n) || !/^-?[0-9.]+$/.test(t) ? td.textContent : n;
  }
  document.querySelectorAll('table.sortable').forEach(function (table) {
    table.querySelectorAll('th').forEach(function (th, col) {
      th.addEventListener('click', function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var desc = th.getAttribute('data-order') !== 'desc';
        rows.sort(function (a, b) {
          var x = cellValue(a.cells[col]), y = cellValue(b.cells[col]);
          var c = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
          return desc ? -c : c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
        table.querySelectorAll('th').forEach(function (h) { h.removeAttribute('data-order'); });
        th.setAttribute('data-order', desc ? 'desc' : 'asc');
      });
    });
  });
  var chart = document.getElementById('chart-time');
  document.querySelectorAll('.legend .key').forEach(function (key) {
    key.addEventListener('mouseenter', function () {
      if (!chart) { return; }
      chart.classList.add('dim');
      chart.querySelectorAll('rect.bar[data-series="' + key.getAttribute('data-series') + '"]')
        .forEach(function (r) { r.classList.add('hot'); });
    });
    key.addEventListener('mouseleave', function () {
      if (!chart) { return; }
      chart.classList.remove('dim');
      chart.querySelectorAll('rect.bar.hot').forEach(function (r) { r.classList.remove('hot'); });
    });
  });
  document.body.setAttribute('data-charts', String(document.querySelectorAll('svg.chart rect.bar').length));
  document.body.setAttribute('data-report', 'ready');
})();
"""


def render(*, title: str, meta: list[str], cards: list[tuple[str, str]], time_chart: str, time_title: str,
           top_chart: str, top_title: str, cluster_chart: str, cluster_title: str, tables: list[tuple[str, str]],
           notes: list[str], more_charts: list[tuple[str, str]] = ()) -> str:
    """The whole document; `more_charts` (title, chart) come after the cluster chart (allocation, idle)."""
    parts = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width,initial-scale=1">',
             f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
             f"<h1>{esc(title)}</h1>", '<div class="meta">' + "<br>".join(esc(m) for m in meta) + "</div>"]
    parts.append('<div class="cards">' + "".join(
        f'<div class="card">{esc(label)}<b>{esc(value)}</b></div>' for label, value in cards) + "</div>")
    parts.extend(f'<p class="note">{esc(n)}</p>' for n in notes)
    parts += [f"<h2>{esc(time_title)}</h2>", time_chart, f"<h2>{esc(top_title)}</h2>", top_chart,
              f"<h2>{esc(cluster_title)}</h2>", cluster_chart]
    for heading, chart in more_charts:
        parts += [f"<h2>{esc(heading)}</h2>", chart]
    for heading, body in tables:
        parts += [f"<h2>{esc(heading)}</h2>", body]
    parts.append(f"<script>{JS}</script></body></html>\n")
    return "".join(parts)
