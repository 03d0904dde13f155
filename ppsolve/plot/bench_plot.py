"""Benchmark figures: makespan relative to the bound per method and problem, and memory against time."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from ppsolve.studies.bench import BenchRow
from ppsolve.plot.figure import new_figure, save_figure

MARKERS = "osD^v<>Pp*hX"


def _index(rows: Sequence[BenchRow]) -> tuple[list[str], list[str]]:
    problems = list(dict.fromkeys(r.problem for r in rows))
    methods = list(dict.fromkeys(r.method for r in rows))
    return problems, methods


def draw_ratio_heatmap(rows: Sequence[BenchRow]):
    """Rows: problems; columns: methods; colour and number: makespan / bound (grey: no valid schedule)."""
    import numpy as np
    from matplotlib.colors import LinearSegmentedColormap

    problems, methods = _index(rows)
    grid = np.full((len(problems), len(methods)), np.nan)
    notes: dict[tuple[int, int], str] = {}
    for r in rows:
        i, j = problems.index(r.problem), methods.index(r.method)
        if r.valid and r.ratio is not None:
            grid[i, j] = r.ratio
        else:
            notes[(i, j)] = {"skipped": "n/a", "infeasible": "inf."}.get(r.status, "x" if r.valid is False else "err")
    width = min(30.0, 4.0 + 0.95 * len(methods))
    height = min(60.0, 2.2 + 0.26 * len(problems))
    fig = new_figure(width, height, layout="constrained")
    ax = fig.add_subplot()
    finite = grid[np.isfinite(grid)]
    top = max(1.05, float(finite.max()) if finite.size else 1.05)
    cmap = LinearSegmentedColormap.from_list("ratio", ["#2b8a3e", "#f2e85c", "#d9480f", "#7a0000"]).with_extremes(
        bad="#e9ecef")
    image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap=cmap, vmin=1.0, vmax=min(top, 1.5),
                      interpolation="nearest")
    for (i, j), value in np.ndenumerate(grid):
        text = f"{value:.3f}" if math.isfinite(value) else notes.get((i, j), "")
        ax.text(j, i, text, ha="center", va="center", fontsize=6.5,
                color="white" if math.isfinite(value) and value > 1.4 else "black")
    ax.set_xticks(range(len(methods)))
    ax.set_xticklabels(methods, rotation=35, ha="left", fontsize=8)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(problems)))
    ax.set_yticklabels(problems, fontsize=7)
    bar = fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01)
    bar.set_label("makespan / lower bound", fontsize=8)
    ax.set_xlabel("n/a: does not apply   inf.: reports infeasible   x: failed the checker   err: method failed",
                  fontsize=7, color="#555555")
    return fig


def draw_memory_vs_makespan(rows: Sequence[BenchRow], columns: int = 4):
    """One small panel per method: its valid runs as points, peak memory (in one microbatch's activations on
    the busiest device) against makespan / bound, over every other method's runs in grey for context."""
    problems, methods = _index(rows)
    points = {m: [(r.peak_memory / r.reference_memory, r.ratio) for r in rows
                  if r.method == m and r.valid and r.ratio is not None and r.reference_memory] for m in methods}
    methods = [m for m in methods if points[m]] or methods[:1]
    every = [p for m in methods for p in points.get(m, [])]
    columns = max(1, min(columns, len(methods)))
    count_rows = -(-len(methods) // columns)
    fig = new_figure(3.1 * columns + 0.6, 2.5 * count_rows + 0.9, layout="constrained")
    axes = fig.subplots(count_rows, columns, sharex=True, sharey=True, squeeze=False)
    colors = _colors(len(methods))
    for index, ax in enumerate(axes.flat):
        if index >= len(methods):
            ax.set_visible(False)
            continue
        method = methods[index]
        if every:
            ax.scatter(*zip(*every), s=9, color="#d0d0d0", linewidths=0)
        mine = points.get(method, [])
        if mine:
            ax.scatter(*zip(*mine), s=26, marker=MARKERS[index % len(MARKERS)], color=colors[index],
                       edgecolors="black", linewidths=0.4, zorder=3)
        ax.axhline(1.0, color="#888888", linewidth=0.8, linestyle=":")
        ax.set_title(f"{method} ({len(mine)} run(s))", fontsize=9, loc="left")
        ax.grid(color="#eeeeee")
        ax.tick_params(labelsize=7)
    for column in range(columns):  # the lowest panel of each column carries the x axis
        lowest = axes[max(r for r in range(count_rows) if r * columns + column < len(methods)), column]
        lowest.tick_params(labelbottom=True)
        lowest.set_xlabel("peak memory (x one microbatch)", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("makespan / lower bound", fontsize=8)
    fig.suptitle(f"memory against time per method, {len(problems)} problem(s): lower left is better "
                 "(grey: every other method's runs)", fontsize=10, x=0.01, ha="left")
    return fig


def _colors(count: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if count <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(count)]


def write_bench_plots(rows: Sequence[BenchRow], out_dir: str | Path) -> list[Path]:
    """ratio.png and memory_vs_makespan.png in ``out_dir``; returns the paths written."""
    out_dir = Path(out_dir)
    paths = [out_dir / "ratio.png", out_dir / "memory_vs_makespan.png"]
    save_figure(draw_ratio_heatmap(rows), paths[0], dpi=110)
    save_figure(draw_memory_vs_makespan(rows), paths[1], dpi=110)
    return paths
