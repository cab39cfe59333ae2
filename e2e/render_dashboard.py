"""docs/dashboard.png: the chart's Grafana dashboard drawn from the lab's own Prometheus
(`make dashboard-picture`; the lab has no Grafana, so this draws what Grafana would).

On a running lab with Prometheus (`LAB_PROMETHEUS=1 make lab-up`), it runs `e2e/demo.sh` (operator
and pool `slurmpool-demo/gpu`, nodes moved 8 -> 5 -> one to the `batch` pool -> 8, scraped as the
chart's ServiceMonitor would), scales the pool to 5 Slurm nodes again and holds it, so the picture
ends with nodes on both sides. Then it reads the dashboard JSON the chart ships (panels, grid
positions, each target's PromQL, legend formats, units), runs every query as a range query over
that time with the variables Grafana would substitute (as e2e/test_dashboard_lab.py does), and
draws the panels in the dashboard's grid. A panel with a query that returns no value fails the
run (exit 1, no picture). The demo's operator and pool stay, as after `make demo`.

Usage: render_dashboard.py [OUT.png] [--range T0 T1]
  OUT.png: default docs/dashboard.png; --range: draw that time range (Unix seconds, as the last run
  prints) from the lab's Prometheus without running the demo again."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen
from matplotlib.dates import AutoDateLocator, DateFormatter  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from PIL import Image  # noqa: E402 - matplotlib's own dependency

import prometheus as lab_prometheus  # noqa: E402 - e2e/prometheus.py, beside this file

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "deploy" / "helm" / "slurmpool" / "files" / "grafana" / "slurmpool.json"
DEMO_NS, DEMO_POOL = "slurmpool-demo", "slurmpool-demo/gpu"
SCRAPE_S, STEP_S = 1, 2  # the lab's scrape interval; a query's step (Grafana's $__interval)
HOLD_S = 30  # at 5 Slurm / 3 inference after the demo, so the picture ends with both sides
GRID_COLUMNS, ROW_PX, WIDTH_PX, DPI = 24, 30, 1500, 100
# Grafana's dark theme and its classic palette
BACKGROUND, PANEL, TEXT, GRIDLINE = "#111217", "#181b1f", "#ccccdc", "#2c3235"
PALETTE = ["#73bf69", "#f2cc0c", "#5794f2", "#ff9830", "#f2495c", "#b877d9", "#8ab8ff", "#ff780a",
           "#96d98d", "#fade2a", "#ffb357", "#ca95e5"]
UNITS = {"s": "s", "ops": "/s", "short": ""}


def grafana_expr(expr: str, range_s: int) -> str:
    """A panel's query with the variables Grafana substitutes (pool: the demo's pool)."""
    rate_interval = max(STEP_S + SCRAPE_S, 4 * SCRAPE_S)
    for var, value in (("$__rate_interval", f"{rate_interval}s"), ("$__range", f"{range_s}s"),
                       ("$__interval", f"{STEP_S}s"), ("$pool", DEMO_POOL)):
        expr = expr.replace(var, value)
    return expr


def utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


def legend(fmt: str, metric: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt or "") or \
        "{" + ", ".join(f"{k}={v}" for k, v in metric.items()) + "}"


def run_demo(lab_dir: Path) -> tuple[float, float]:
    """A fresh demo.sh (a demo left running is stopped first), then 5/3 held HOLD_S seconds;
    returns the time range to draw."""
    from conftest import Lab  # e2e/, beside this file
    from harness import stop_demo, wait

    lab = Lab.from_env_file(lab_dir / "env")
    stop_demo(lab)
    t0 = time.time()
    subprocess.run([str(REPO / "e2e" / "demo.sh")], env={**lab.env, "LAB_DIR": str(lab_dir)}, check=True)
    lab.kubectl("scale", "snp", "gpu", "-n", DEMO_NS, "--replicas=5")
    wait(lambda: lab.kubectl("get", "snp", "gpu", "-n", DEMO_NS, "-o",
                             "jsonpath={.status.slurm.ready}/{.status.inference.ready}/{.status.moving}").stdout == "5/3/0",
         300, what="the demo's pool at 5/3")
    time.sleep(HOLD_S)
    return t0, time.time()


def query_panels(prom: lab_prometheus.Prometheus, panels: list[dict], t0: float, t1: float) -> list[list[tuple[str, list]]]:
    """Each panel's series as (legend, [(datetime, value)]); exits naming every query without a value."""
    range_s, empty, out = math.ceil(t1 - t0), [], []
    for panel in panels:
        series = []
        for target in panel.get("targets", []):
            result = prom.query_range(grafana_expr(target["expr"], range_s), t0, t1, STEP_S)
            with_values = [s for s in result if any(not math.isnan(float(v)) for _, v in s["values"])]
            if not with_values:
                empty.append(f"{panel['title']!r}: {target['expr']}")
            for s in with_values:
                points = [(utc(float(t)), float(v)) for t, v in s["values"]]
                series.append((legend(target.get("legendFormat", ""), s["metric"]), points))
        if panel["type"] != "row":
            print(f"PANEL | {panel['title']} | {len(series)} series")
        out.append(series)
    if empty:
        sys.exit("render_dashboard: panels without data:\n  " + "\n  ".join(empty))
    return out


def fmt_value(value: float, unit: str) -> str:
    text = f"{value:.0f}" if value == int(value) and abs(value) < 1e6 else f"{value:.3g}"
    return text + UNITS.get(unit, "")


def last_value(points: list) -> float:
    return next((v for _, v in reversed(points) if not math.isnan(v)), math.nan)


def draw_stat(ax, series, unit: str) -> None:
    points = series[0][1]
    times, values = zip(*points)
    ax.fill_between(times, values, color=PALETTE[0], alpha=0.15, linewidth=0)
    ax.plot(times, values, color=PALETTE[0], linewidth=1)
    ax.text(0.5, 0.45, fmt_value(last_value(points), unit), transform=ax.transAxes, ha="center",
            va="center", fontsize=26, color=PALETTE[0], fontweight="bold")
    ax.axis("off")


def draw_bargauge(ax, series, unit: str) -> None:
    names = [name for name, _ in series]
    values = [last_value(points) for _, points in series]
    ax.barh(names, values, color=PALETTE[:len(values)], height=0.6)
    for i, v in enumerate(values):
        ax.text(v, i, " " + fmt_value(round(v, 3), unit), va="center", color=TEXT, fontsize=8)
    ax.set_xlim(0, max(values) * 1.3 or 1)
    ax.invert_yaxis()
    ax.tick_params(colors=TEXT, labelsize=8, length=0)
    ax.set_xticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


def draw_timeseries(ax, series, unit: str, stacked: bool, columns: int) -> None:
    label_chars = 24 if columns == 2 else 36  # what fits in a legend column of a narrow or wide panel
    base: dict = {}
    for i, (name, points) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        times = [t for t, _ in points]
        values = [0.0 if math.isnan(v) else v for _, v in points] if stacked else [v for _, v in points]
        below = [base.get(t, 0.0) for t in times] if stacked else [0.0] * len(times)
        top = [b + v for b, v in zip(below, values)]
        if stacked:
            base.update(zip(times, top))
        ax.plot(times, top, color=color, linewidth=1.2, label=name[:label_chars])
        lone = [(t, v) for i, (t, v) in enumerate(zip(times, top)) if not math.isnan(v)
                and all(math.isnan(top[j]) for j in (i - 1, i + 1) if 0 <= j < len(top))]
        if lone:  # a value between two gaps draws no line: a point, as Grafana's showPoints "auto"
            ax.plot(*zip(*lone), "o", color=color, markersize=3)
        ax.fill_between(times, below, top, color=color, alpha=0.1, linewidth=0)
    ax.yaxis.set_major_formatter(lambda v, _: fmt_value(round(v, 3), unit))
    axes_style(ax)
    shown = 6
    handles, labels = ax.get_legend_handles_labels()
    if len(labels) > shown:
        labels = labels[:shown - 1] + [f"+{len(labels) - shown + 1} more"]
        handles = handles[:shown]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(0, -0.12), ncol=columns, fontsize=7,
              frameon=False, labelcolor=TEXT, handlelength=1)


def draw_state_timeline(ax, series, mappings: dict) -> None:
    true_color = mappings.get("1", {}).get("color", PALETTE[3])
    for row, (_, points) in enumerate(series):
        for (ta, va), (tb, _) in zip(points, points[1:]):
            if va == 1:
                ax.axvspan(ta, tb, ymin=(len(series) - row - 0.9) / len(series),
                           ymax=(len(series) - row - 0.1) / len(series), color=true_color, linewidth=0)
    axes_style(ax)
    ax.set_yticks([(len(series) - row - 0.5) / len(series) for row in range(len(series))],
                  [name for name, _ in series])
    ax.set_ylim(0, 1)


def axes_style(ax) -> None:
    ax.set_facecolor(PANEL)
    ax.tick_params(colors=TEXT, labelsize=7, length=0)
    ax.grid(color=GRIDLINE, linewidth=0.5)
    ax.xaxis.set_major_locator(AutoDateLocator(maxticks=5))
    ax.xaxis.set_major_formatter(DateFormatter("%H:%M:%S"))
    ax.yaxis.set_major_locator(MaxNLocator(4, steps=[1, 2, 5, 10]))
    for spine in ax.spines.values():
        spine.set_visible(False)


def value_mappings(panel: dict) -> dict:
    for mapping in panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", []):
        if mapping.get("type") == "value":
            return mapping["options"]
    return {}


def draw(dashboard: dict, panels: list[dict], data: list, out: Path, t0: float, t1: float) -> None:
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    height_px = rows * ROW_PX + 60
    fig = plt.figure(figsize=(WIDTH_PX / DPI, height_px / DPI), dpi=DPI, facecolor=BACKGROUND)
    span = f"{utc(t0):%Y-%m-%d %H:%M:%S} to {utc(t1):%H:%M:%S}"
    fig.text(0.01, 1 - 20 / height_px, f"{dashboard['title']}   pool {DEMO_POOL}   {span} UTC (the lab, make demo)",
             color=TEXT, fontsize=11, va="center")
    top = 1 - 45 / height_px

    def box(gp: dict, pad_top: float = 0.0) -> list[float]:
        """Figure coordinates [left, bottom, width, height] of a grid position (pad: the title)."""
        cell_h = ROW_PX / height_px
        left, width = gp["x"] / GRID_COLUMNS, gp["w"] / GRID_COLUMNS
        bottom = top - (gp["y"] + gp["h"]) * cell_h
        return [left + 0.004, bottom + 0.004, width - 0.008, gp["h"] * cell_h - 0.008 - pad_top]

    for panel, series in zip(panels, data):
        gp, kind = panel["gridPos"], panel["type"]
        if kind == "row":
            fig.text(box(gp)[0], box(gp)[1] + 0.004, panel["title"], color=TEXT, fontsize=11, fontweight="bold")
            continue
        frame = fig.add_axes(box(gp), facecolor=PANEL)
        frame.set_xticks([]), frame.set_yticks([])
        for spine in frame.spines.values():
            spine.set_color(GRIDLINE)
        frame.text(0.01, 0.97, panel["title"], transform=frame.transAxes, color=TEXT, fontsize=9, va="top")
        left, bottom, width, height = box(gp)
        legend_h = 0.3 if kind == "timeseries" else 0.0  # of the panel, below the plot
        title_h, panel_h = 22 / height_px, height
        inner = [left + (0.01 if kind == "stat" else 0.045 * 24 / gp["w"] if kind != "state-timeline" else 0.09 * 24 / gp["w"]),
                 bottom + panel_h * legend_h + 0.006, 0, panel_h * (1 - legend_h) - title_h - 0.01]
        inner[2] = left + width - inner[0] - 0.008
        if kind == "bargauge":
            inner[0] = left + 0.05
            inner[2] = left + width - inner[0] - 0.01
        ax = fig.add_axes(inner, facecolor=PANEL)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        if kind == "stat":
            draw_stat(ax, series, unit)
        elif kind == "bargauge":
            draw_bargauge(ax, series, unit)
        elif kind == "state-timeline":
            draw_state_timeline(ax, series, value_mappings(panel))
        else:
            stacking = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {}).get("stacking", {})
            draw_timeseries(ax, series, unit, stacked=stacking.get("mode") == "normal", columns=2 if gp["w"] <= 8 else 3)
        if kind in ("timeseries", "state-timeline"):
            ax.set_xlim(utc(t0), utc(t1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI, facecolor=BACKGROUND)
    # a palette of 128 colours: a third of the size, and the picture looks the same
    Image.open(out).convert("RGB").quantize(colors=128).save(out, optimize=True)
    print(f"render_dashboard: wrote {out} ({out.stat().st_size // 1024} KiB)")


def main() -> None:
    args = sys.argv[1:]
    given = None
    if "--range" in args:
        i = args.index("--range")
        given = float(args[i + 1]), float(args[i + 2])
        del args[i:i + 3]
    out = Path(args[0] if args else REPO / "docs" / "dashboard.png")
    lab = lab_prometheus.lab_dir()
    if not (lab / "env").exists():
        sys.exit(f"render_dashboard: no lab at {lab}: LAB_PROMETHEUS=1 make lab-up first")
    prom = lab_prometheus.start(lab)  # started unless running
    t0, t1 = given or run_demo(lab)
    print(f"render_dashboard: range {t0:.0f} {t1:.0f}")
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    data = query_panels(prom, panels, t0, t1)
    draw(dashboard, panels, data, out, t0, t1)


if __name__ == "__main__":
    main()
