"""Drawing the memory/time frontier: solver curve(s) over capacity, baselines as points."""

from __future__ import annotations

from pathlib import Path

from ppsolve.studies.frontier import CURVE_LABELS, Frontier
from ppsolve.plot.figure import new_figure, save_figure
from ppsolve.tolerance import EPS

# (colour, line style) of each curve; drawn in CURVE_LABELS' order, so that the curve with the most
# levers stays visible where curves coincide.
CURVE_STYLE = {"no-lever": ("#c92a2a", "--"), "recompute": ("#2b8a3e", "-."), "offload": ("#1864ab", "-"),
               "offload+recompute": ("#862e9c", "-")}
MARKERS = "sD^v<>Pp*hXo"


def _x(capacity: float | None, unbounded_x: float) -> float:
    return unbounded_x if capacity is None else capacity


def draw_frontier(frontier: Frontier, size: tuple[float, float] = (9.0, 5.5)):
    """Makespan against memory capacity; the last point of each curve is 'unbounded'."""
    fig = new_figure(*size)
    ax = fig.add_axes((0.09, 0.11, 0.64, 0.79))
    finite = [p.capacity for p in frontier.points if p.capacity is not None]
    # baselines sit at their own peak; a solver run without a cap is drawn at 'unbounded', whatever its peak
    peaks = [p.peak_memory for p in frontier.curve("baseline") if p.peak_memory is not None] or \
        ([] if finite else [p.peak_memory for p in frontier.points if p.peak_memory is not None])
    right = max([*finite, *peaks, EPS])
    left = min([*finite, *peaks, right])
    unbounded_x = right + 0.12 * max(right - left, right * 0.2)
    for curve in frontier.curves:
        color, style = CURVE_STYLE[curve]
        label = CURVE_LABELS[curve]
        pts = [p for p in frontier.curve(curve) if p.best_makespan is not None]
        if not pts:
            continue
        xs = [_x(p.capacity, unbounded_x) for p in pts]
        ax.step(xs, [p.best_makespan for p in pts], where="post", color=color, linewidth=1.8, linestyle=style,
                label=label)
        ax.plot(xs, [p.best_makespan for p in pts], "o", color=color, markersize=5)
        proved = [(x, p.best_makespan) for x, p in zip(xs, pts) if p.status == "optimal"
                  and p.best_makespan == p.makespan]
        if proved:
            ax.plot(*zip(*proved), "o", color="white", markersize=2.2)
        raw = [(x, p.makespan) for x, p in zip(xs, pts) if p.makespan is not None and p.makespan > p.best_makespan]
        if raw:
            ax.plot(*zip(*raw), "x", color=color, markersize=5, alpha=0.6, label=f"{label}: raw run, worse")
        bounds = [(x, p.lower_bound) for x, p in zip(xs, pts) if p.lower_bound is not None]
        if bounds and any(b < p.best_makespan - EPS for (_, b), p in zip(bounds, pts)):
            ax.plot(*zip(*bounds), linestyle=":", color=color, linewidth=1.0, label=f"{label}: lower bound")
    baselines = frontier.curve("baseline")
    for index, p in enumerate(b for b in baselines if b.valid and b.makespan is not None):
        ax.plot(p.peak_memory, p.makespan, MARKERS[index % len(MARKERS)], markersize=7, linestyle="none",
                markeredgecolor="black", markeredgewidth=0.5, label=f"{p.method} (peak {p.peak_memory:g})")
    ax.axvline(unbounded_x, color="#bbbbbb", linewidth=0.6, linestyle="--")
    ticks = [t for t in ax.get_xticks() if left * 0.8 <= t < right + 0.5 * (unbounded_x - right)]
    ax.set_xticks([*ticks, unbounded_x])
    ax.set_xticklabels([f"{t:g}" for t in ticks] + ["unbounded"], fontsize=8)
    ax.set_xlim(min(left, *(ticks or [left])) - 0.05 * (unbounded_x - left), unbounded_x + 0.05 * (unbounded_x - left))
    time_unit, memory_unit = frontier.units
    ax.set_xlabel(f"memory capacity per device, {memory_unit} (baselines: their own peak memory)", fontsize=9)
    ax.set_ylabel(f"makespan ({time_unit})", fontsize=9)
    ax.grid(color="#eeeeee")
    limit = "" if frontier.time_limit is None else f", {frontier.time_limit:g} s per point"
    ax.set_title(f"memory/time frontier of {frontier.problem}\n(solver {frontier.solver}{limit}; each curve: "
                 "the memory levers it may use)", fontsize=9.5, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7.5, frameon=False)
    fig.text(0.09, 0.015, "curve: best makespan found at that capacity or a smaller one; white dot: proved optimal",
             fontsize=7, color="#555555")
    return fig


def plot_frontier(frontier: Frontier, path: str | Path, dpi: float = 110) -> None:
    save_figure(draw_frontier(frontier), path, dpi)
