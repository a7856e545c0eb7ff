#!/usr/bin/env python3
"""Draws the Grafana board of deploy/observability/ as an SVG picture, from a real Prometheus.

No Grafana is needed: each panel's own PromQL goes to Prometheus's range-query API, and the
answers are drawn on the board's grid (its gridPos and titles): a time-series panel as lines with
a legend of its series, a stat panel as its last values. The board's variables are put in as
Grafana would with every instance selected: $instance is `.*`, $__rate_interval the
--rate-interval given. Python 3's standard library only.

    scripts/board-snapshot.py --prometheus http://127.0.0.1:9090 --start 1718000000 \\
        --out docs/images/hmdp-board.svg

The picture of docs/internals/observability.md comes from the board test's own Prometheus:

    HMDP_BOARD_SNAPSHOT=$PWD/docs/images/hmdp-board.svg \\
        cargo test -p hmdp --test api -- observability::the_board_and_the_alerts
"""

import argparse
import html
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BOARD = REPO / "deploy" / "observability" / "hmdp-dashboard.json"

# Grafana's grid: 24 columns, 30 px rows, 8 px between panels.
COLUMNS = 24
COLUMN_WIDTH = 60
ROW_HEIGHT = 30
GAP = 8
HEADER = 70

# Grafana's dark theme and its classic series palette.
BACKGROUND = "#111217"
PANEL = "#181b1f"
BORDER = "#2c3235"
TEXT = "#ccccdc"
DIM = "#8e8e9e"
GRID = "#2a2d33"
PALETTE = [
    "#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9",
    "#705da0", "#508642", "#cca300", "#447ebc", "#c15c17", "#890f02", "#0a437c",
]
FONT = "Inter, Helvetica, Arial, sans-serif"


def variables(rate_interval: str, step: int, span: int) -> list[tuple[str, str]]:
    """What Grafana puts for the board's variables, longest names first."""
    values = {
        "instance": ".*",
        "__rate_interval": rate_interval,
        "__interval": f"{step}s",
        "__range": f"{span}s",
    }
    out = []
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        out += [("${" + name + "}", value), ("$" + name, value)]
    return out


def substitute(expr: str, subs: list[tuple[str, str]]) -> str:
    for name, value in subs:
        expr = expr.replace(name, value)
    if "$" in expr:
        sys.exit(f"board-snapshot: a variable this script does not know in {expr!r}")
    return expr


def query_range(prometheus: str, expr: str, start: int, end: int, step: int) -> list[dict]:
    """The series `expr` gives over the range, as Prometheus's `data.result`."""
    params = urllib.parse.urlencode(
        {"query": expr, "start": start, "end": end, "step": step}
    )
    url = f"{prometheus.rstrip('/')}/api/v1/query_range?{params}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.load(resp)
    if body.get("status") != "success":
        sys.exit(f"board-snapshot: Prometheus refuses {expr!r}: {body.get('error')}")
    return body["data"]["result"]


def legend(fmt: str, labels: dict) -> str:
    if fmt:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)
    shown = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return labels.get("__name__", "") + ("{" + shown + "}" if shown else "")


def panels(board: dict) -> list[dict]:
    """Every panel, those inside collapsed rows included, in board order."""
    out = []
    for panel in board.get("panels", []):
        out.append(panel)
        out += panel.get("panels", [])
    return out


def number(v: float, unit: str) -> str:
    """A value in the panel's unit, shortly."""
    if v is None or math.isnan(v):
        return "–"
    if unit == "percentunit":
        return f"{v * 100:.0f}%"
    if unit == "s":
        a = abs(v)
        if a == 0:
            return "0 s"
        if a < 1e-3:
            return f"{v * 1e6:.0f} µs"
        if a < 1:
            return f"{v * 1e3:.3g} ms"
        return f"{v:.3g} s"
    suffix = {"reqps": " req/s", "ops": " ops/s"}.get(unit, "")
    a = abs(v)
    if a >= 1e6:
        text = f"{v / 1e6:.3g}M"
    elif a >= 1e3:
        text = f"{v / 1e3:.3g}k"
    elif a == 0 or a >= 0.01:
        text = f"{v:.3g}"
    else:
        text = f"{v:.1e}"
    return text + suffix


def ticks(low: float, high: float, count: int = 4) -> list[float]:
    """Round tick values covering [low, high]."""
    if high <= low:
        high = low + 1
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step + 1e-9) * step
    last = math.ceil(high / step - 1e-9) * step
    return [round(first + i * step, 12) for i in range(round((last - first) / step) + 1)]


class Svg:
    def __init__(self):
        self.parts: list[str] = []

    def add(self, s: str):
        self.parts.append(s)

    def text(self, x, y, s, size=12, fill=TEXT, anchor="start", weight="normal"):
        self.add(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" '
            f'text-anchor="{anchor}" font-weight="{weight}">{html.escape(s)}</text>'
        )

    def rect(self, x, y, w, h, fill, stroke="none", rx=2):
        self.add(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
            f'fill="{fill}" stroke="{stroke}" rx="{rx}"/>'
        )

    def line(self, x1, y1, x2, y2, stroke=GRID):
        self.add(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"/>'
        )


def clip(s: str, width: float, size: float) -> str:
    """`s` cut to about `width` pixels of text of `size`."""
    fits = max(3, int(width / (size * 0.55)))
    return s if len(s) <= fits else s[: fits - 1] + "…"


def draw_timeseries(svg, box, series, unit, start, end):
    x, y, w, h = box
    rows = min(len(series), 4)
    legend_h = rows * 14 + 4 if series else 0
    left, right, top, bottom = x + 64, x + w - 12, y + 8, y + h - legend_h - 26
    values = [v for s in series for _, v in s["points"] if not math.isnan(v)]
    if not values:
        svg.text(x + w / 2, y + h / 2, "No data", size=14, fill=DIM, anchor="middle")
        return
    low, high = min(0.0, min(values)), max(values)
    if high == low:
        high = low + (abs(low) or 1)
    marks = ticks(low, high)
    low, high = marks[0], marks[-1]

    def px(t):
        return left + (t - start) / max(end - start, 1) * (right - left)

    def py(v):
        return bottom - (v - low) / (high - low) * (bottom - top)

    for m in marks:
        svg.line(left, py(m), right, py(m))
        svg.text(left - 6, py(m) + 4, number(m, unit), size=10, fill=DIM, anchor="end")
    labels = 5 if right - left > 400 else 3
    for i in range(labels):
        t = start + (end - start) * i / (labels - 1)
        label = datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S")
        anchor = "start" if i == 0 else "end" if i == labels - 1 else "middle"
        svg.text(px(t), bottom + 15, label, size=10, fill=DIM, anchor=anchor)
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        runs, run = [], []
        for t, v in s["points"]:
            if math.isnan(v):
                if run:
                    runs.append(run)
                run = []
            else:
                run.append(f"{px(t):.1f},{py(v):.1f}")
        if run:
            runs.append(run)
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                svg.add(f'<circle cx="{cx}" cy="{cy}" r="1.8" fill="{color}"/>')
            else:
                svg.add(
                    f'<polyline points="{" ".join(run)}" fill="none" stroke="{color}" '
                    'stroke-width="1.5" stroke-linejoin="round"/>'
                )
    # The legend: up to two columns of four rows, each series with its last value.
    columns = 2 if len(series) > 4 else 1
    col_w = (w - 20) / columns
    shown = series[: rows * columns]
    for i, s in enumerate(shown):
        col, row = divmod(i, rows)
        lx, ly = x + 10 + col * col_w, y + h - legend_h + row * 14 + 6
        svg.rect(lx, ly - 8, 12, 3, PALETTE[i % len(PALETTE)], rx=1)
        last = next((v for _, v in reversed(s["points"]) if not math.isnan(v)), float("nan"))
        label = f"{s['name']}  {number(last, unit)}"
        svg.text(lx + 17, ly - 3, clip(label, col_w - 22, 11), size=11)
    if len(series) > len(shown):
        svg.text(x + w - 10, y + h - 4, f"+{len(series) - len(shown)} more", size=10,
                 fill=DIM, anchor="end")


def draw_stat(svg, box, series, unit):
    x, y, w, h = box
    last = []
    for s in series:
        v = next((v for _, v in reversed(s["points"]) if not math.isnan(v)), None)
        last.append((s["name"], v))
    if not last:
        svg.text(x + w / 2, y + h / 2, "No data", size=14, fill=DIM, anchor="middle")
        return
    shown = last[:4]
    cell = h / len(shown)
    for i, (name, v) in enumerate(shown):
        cy = y + cell * i + cell / 2
        size = min(36, cell * 0.5)
        svg.text(x + w / 2, cy + size * 0.2, number(v, unit), size=size, fill=PALETTE[0],
                 anchor="middle", weight="bold")
        svg.text(x + w / 2, cy + size * 0.2 + 14, clip(name, w - 16, 11), size=11,
                 fill=DIM, anchor="middle")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", required=True, help="Prometheus's base URL")
    parser.add_argument("--board", type=Path, default=BOARD, help="the Grafana board JSON")
    parser.add_argument("--out", type=Path, required=True, help="the SVG file to write")
    parser.add_argument("--start", type=int, help="Unix seconds (default: --end minus 15 min)")
    parser.add_argument("--end", type=int, help="Unix seconds (default: now)")
    parser.add_argument("--step", type=int, help="seconds between points (default: range/240)")
    parser.add_argument("--rate-interval", default="15s",
                        help="what $__rate_interval stands for (default: 15s)")
    args = parser.parse_args()

    end = args.end or int(time.time())
    start = args.start or end - 900
    if start >= end:
        sys.exit("board-snapshot: --start must be before --end")
    step = args.step or max(1, math.ceil((end - start) / 240))
    board = json.loads(args.board.read_text())
    subs = variables(args.rate_interval, step, end - start)

    all_panels = panels(board)
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in all_panels)
    width = COLUMNS * COLUMN_WIDTH + GAP
    height = HEADER + bottom * ROW_HEIGHT + GAP
    svg = Svg()
    svg.add(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{FONT}">'
    )
    svg.rect(0, 0, width, height, BACKGROUND, rx=0)
    when = " – ".join(
        datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        for t in (start, end)
    )
    svg.text(GAP + 4, 30, board.get("title", "board"), size=20, weight="bold")
    svg.text(GAP + 4, 54, f"{when} UTC · every instance · $__rate_interval = "
             f"{args.rate_interval} · drawn by scripts/board-snapshot.py from the board's "
             "own queries (not a Grafana screenshot)", size=12, fill=DIM)

    drawn = 0
    for panel in all_panels:
        pos = panel["gridPos"]
        x = GAP + pos["x"] * COLUMN_WIDTH
        y = HEADER + pos["y"] * ROW_HEIGHT
        w = pos["w"] * COLUMN_WIDTH - GAP
        h = pos["h"] * ROW_HEIGHT - GAP
        title = panel.get("title", "")
        if panel.get("type") == "row":
            svg.text(x, y + 20, title, size=15, weight="bold")
            continue
        svg.rect(x, y, w, h, PANEL, stroke=BORDER)
        svg.text(x + 10, y + 20, clip(title, w - 20, 13), size=13, weight="bold")
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "short")
        series = []
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], subs)
            for result in query_range(args.prometheus, expr, start, end, step):
                points = [(float(t), float(v)) for t, v in result["values"]]
                series.append({
                    "name": legend(target.get("legendFormat", ""), result["metric"]),
                    "points": points,
                })
        box = (x, y + 28, w, h - 28)
        svg.add(f'<clipPath id="p{drawn}"><rect x="{x}" y="{y}" width="{w}" height="{h}"/>'
                f'</clipPath><g clip-path="url(#p{drawn})">')
        if panel.get("type") == "stat":
            draw_stat(svg, box, series, unit)
        else:
            draw_timeseries(svg, box, series, unit, start, end)
        svg.add("</g>")
        drawn += 1
    svg.add("</svg>")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(svg.parts) + "\n")
    print(f"board-snapshot: {drawn} panels, {start}..{end} step {step}s -> {args.out}")


if __name__ == "__main__":
    main()
