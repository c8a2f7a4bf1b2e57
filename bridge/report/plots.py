"""Validation plots as PNG files.

Figures are built with matplotlib's object API (Figure + Agg canvas), not pyplot: no GUI backend
is ever selected and no global figure state leaks between calls.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogFormatter

MAX_LANES = 200  # more lanes than this is unreadable in a PNG
MODE_COLORS = {"simulate": "tab:blue", "frozen": "tab:orange", "memo": "tab:green"}


def _save(fig: Figure, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)


def fct_scatter(errors: pd.DataFrame, path: Path, label: str) -> None:
    """Stock FCT vs candidate FCT per matched flow (columns fct_ref, fct_cand), log-log, y = x."""
    fig = Figure(figsize=(5.5, 5))
    ax = fig.add_subplot()
    if errors.empty:
        _empty(ax, "no flow finished in both runs")
    else:
        x, y = errors.fct_ref / 1e3, errors.fct_cand / 1e3
        lo, hi = min(x.min(), y.min()) / 1.2, max(x.max(), y.max()) * 1.2
        ax.plot([lo, hi], [lo, hi], color="gray", lw=1, ls="--", label="y = x")
        ax.scatter(x, y, s=8, alpha=0.6, label=f"{len(errors)} flows")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # plain numbers (20, not 2x10^1); minor labels only when few
            axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.legend(loc="upper left")
    ax.set_xlabel("stock FCT (us)")
    ax.set_ylabel(f"{label} FCT (us)")
    ax.set_title("Per-flow FCT")
    _save(fig, path)


def fct_error_cdf(errors: pd.Series, noise: pd.Series | None, path: Path, label: str) -> None:
    """CDF of per-flow relative FCT error, with the noise floor's (stock, other seed) if given."""
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    curves = [(errors, label, "-")]
    if noise is not None:
        curves.append((noise, "noise floor (stock, other seed)", "--"))
    for series, name, style in curves:
        e = np.sort(series.to_numpy(dtype=float)) * 100
        if len(e):
            ax.step(e, np.arange(1, len(e) + 1) / len(e), where="post", ls=style, label=f"{name} ({len(e)} flows)")
    if ax.lines:
        ax.legend(loc="lower right")
    else:
        _empty(ax, "no flow finished in both runs")
    ax.set_xlabel("|FCT - FCT stock| / FCT stock (%)")
    ax.set_ylabel("fraction of flows")
    ax.set_ylim(0, 1.02)
    ax.set_title("Per-flow FCT error")
    _save(fig, path)


def _partition_lanes(partitions: pd.DataFrame):
    order = partitions.groupby("partition").start_ns.min().sort_values().index
    shown = order[:MAX_LANES]
    groups = partitions.groupby("partition")
    lanes, colors = [], []
    for p in shown:
        rows = groups.get_group(p)
        lanes.append([(s / 1e3, (e - s) / 1e3) for s, e in zip(rows.start_ns, rows.end_ns)])
        colors.append([MODE_COLORS.get(m, "tab:gray") for m in rows["mode"]])
    legend = [Patch(color=c, label=m) for m, c in MODE_COLORS.items()]
    return lanes, colors, [str(p) for p in shown], legend, "partition", \
        f"partition modes ({len(shown)} of {len(order)} partitions)"


def _flow_lanes(flows: pd.DataFrame):
    ordered = flows.sort_values(["start_ns", "flow_id"])
    # An even sample keeps the whole time range visible when there are too many flows.
    picks = np.unique(np.linspace(0, len(ordered) - 1, min(len(ordered), MAX_LANES)).astype(int))
    shown = ordered.iloc[picks]
    horizon = max(int(flows.end_ns.max()), int(flows.start_ns.max()))
    kinds = sorted(set(shown.collective))
    palette = {k: f"C{i % 10}" for i, k in enumerate(kinds)}
    lanes, colors = [], []
    for f in shown.itertuples(index=False):
        end = f.end_ns if f.end_ns >= 0 else horizon  # unfinished: drawn up to the end, in gray
        lanes.append([(f.start_ns / 1e3, max(end - f.start_ns, 1) / 1e3)])
        colors.append([palette[f.collective] if f.end_ns >= 0 else "tab:gray"])
    legend = [Patch(color=palette[k], label=k) for k in kinds] if len(kinds) > 1 else []
    return lanes, colors, [str(i) for i in shown.flow_id], legend, "flow (by start time)", \
        f"flow spans ({len(shown)} of {len(flows)} flows; no partitions.csv)"


def timeline(flows: pd.DataFrame, partitions: pd.DataFrame | None, path: Path, label: str) -> None:
    """Partition modes over simulated time, one lane per partition (columns partition, start_ns,
    end_ns, mode); without partitions, each flow's [start, end] span, one lane per flow by start.
    """
    if partitions is not None and not partitions.empty:
        lanes, colors, names, legend, ylabel, title = _partition_lanes(partitions)
    elif not flows.empty:
        lanes, colors, names, legend, ylabel, title = _flow_lanes(flows)
    else:
        lanes, colors, names, legend, ylabel, title = [], [], [], [], "", "no flows"
    fig = Figure(figsize=(9, min(max(2.5, 1.5 + 0.3 * len(lanes)), 8)))  # lanes stay thin when few
    ax = fig.add_subplot()
    for i, (spans, cs) in enumerate(zip(lanes, colors)):
        ax.broken_barh(spans, (i - 0.4, 0.8), facecolors=cs, linewidth=0)
    if lanes:
        ax.set_ylim(len(lanes) - 0.5, -0.5)  # first lane on top
    if 0 < len(lanes) <= 30:  # few enough lanes to name
        ax.set_yticks(range(len(lanes)), names)
    else:
        ax.set_yticks([])
    if legend:
        ax.legend(handles=legend, loc="upper right", fontsize="small")
    ax.set_ylabel(ylabel)
    ax.set_xlabel("simulated time (us)")
    ax.set_title(f"{label}: {title}")
    _save(fig, path)
