"""Gantt chart of a schedule: per device its compute lane (and host-link lanes), memory below.

Ops are coloured by kind, the chunk (which of the device's stages) by shade, and
the microbatch number is written in a box when it fits. Below, one panel per
device draws its held memory over time with its capacity; the title carries the
method, makespan, bound and gap, bubble ratio and peak memory.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

from ppsolve.bounds import makespan_lower_bound
from ppsolve.memory import memory_curves
from ppsolve.ops import OpKind
from ppsolve.schedule import Schedule
from ppsolve.tolerance import EPS, exceeds

KIND_COLORS = {
    OpKind.F: "#4C72B0",
    OpKind.B: "#DD8452",
    OpKind.W: "#55A868",
    OpKind.R: "#CCB974",
    OpKind.OFFLOAD: "#8172B3",
    OpKind.RELOAD: "#C44E52",
}
CAPACITY_COLOR = "#C03030"

# Layout, in inches.
LEFT, RIGHT, TOP, BOTTOM = 0.95, 1.0, 1.05, 0.55
COMPUTE_ROW, TRANSFER_ROW, DEVICE_GAP = 0.34, 0.17, 0.08
MEMORY_ROW, MEMORY_GAP = 0.52, 0.5
MIN_OP_WIDTH = 0.14  # width the shortest compute op gets by default
MAX_WIDTH = 32.0
WRAP_WIDTH = 24.0  # a schedule that would need more than MAX_WIDTH is wrapped over rows of this width
MAX_SEGMENTS = 4  # at most this many rows of time; beyond, boxes shrink (never below MIN_BOX)
MAX_WRAPPED_HEIGHT = 12.0  # inches the wrapped rows may take together (many devices: fewer rows)
SEGMENT_GAP = 0.45
SEPARATE_MEMORY_PANELS = 16  # above this many devices, memory shares one panel
LABEL_FONT = 5.5
MIN_BOX = 0.025  # inches: the narrowest a box is drawn, so that light stages stay visible
HEAD_FONT, SUB_FONT = 11.0, 8.5
CHAR_EM = 0.6  # average character width of the title font, in ems


@dataclass(frozen=True)
class GanttLayout:
    """Figure size and where each lane sits (y in row units, 1 = a compute row)."""

    width: float
    height: float
    gantt_height: float
    memory_height: float
    transfer_devices: tuple[int, ...]
    memory_panels: int
    title: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    top: float = TOP
    segments: int = 1  # rows the time axis is wrapped over; gantt_height covers them all
    @property
    def lanes(self) -> bool:
        return bool(self.transfer_devices)


def shade(color: str, chunk: int, chunks: int) -> tuple[float, float, float]:
    """``color`` for chunk 0, mixed with more white for each later chunk of a device."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    mix = 0.0 if chunks <= 1 else 0.6 * chunk / (chunks - 1)
    return (r + (1 - r) * mix, g + (1 - g) * mix, b + (1 - b) * mix)


def most_chunks(problem) -> int:
    """The most stages one device holds (an explicit placement may give devices different numbers)."""
    return max((len(stages) for stages in problem.stages_of_device), default=1)


def transfer_devices(schedule: Schedule) -> tuple[int, ...]:
    """The devices that move anything to or from host memory: only they get d2h/h2d lanes."""
    return tuple(sorted({op.device for op in schedule.ops if op.kind.is_transfer}))


def has_transfer_lanes(schedule: Schedule) -> bool:
    return bool(transfer_devices(schedule))


def wrap_title(schedule: Schedule, width: float) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The two title lines, each wrapped to the width of the figure (in inches)."""
    head, sub = title_lines(schedule)
    room = max(1.0, width - LEFT - 0.15) * 72
    return (tuple(textwrap.wrap(head, int(room / (HEAD_FONT * CHAR_EM)))),
            tuple(textwrap.wrap(sub, int(room / (SUB_FONT * CHAR_EM)))))


def _top(title: tuple[tuple[str, ...], tuple[str, ...]]) -> float:
    """Room above the chart: the title's lines plus the legend row."""
    head, sub = title
    return TOP + 0.2 * max(0, len(head) - 1) + 0.16 * max(0, len(sub) - 1)


def layout(schedule: Schedule, size: tuple[float, float] | None = None) -> GanttLayout:
    """A size that keeps the shortest op's label readable, within sensible limits."""
    problem = schedule.problem
    movers = transfer_devices(schedule)
    d = problem.devices
    gantt = d * (COMPUTE_ROW + DEVICE_GAP) + len(movers) * 2 * TRANSFER_ROW
    panels = d if d <= SEPARATE_MEMORY_PANELS else 1
    memory = d * MEMORY_ROW if panels > 1 else 2.5
    if size is not None:
        width, height = size
        title = wrap_title(schedule, width)
        top = _top(title)
        scale = max(0.05, height - top - BOTTOM - MEMORY_GAP) / (gantt + memory)
        return GanttLayout(width, height, gantt * scale, memory * scale, movers, panels, title, top)
    durations = [op.duration for op in schedule.ops if op.kind.is_compute and op.duration > 0]
    shortest = min(durations, default=1.0)
    span = max(schedule.makespan, shortest)
    natural = MIN_OP_WIDTH * span / shortest  # inches of time axis for the shortest op to get its width
    segments = 1
    if LEFT + RIGHT + natural > MAX_WIDTH:
        fit = int((MAX_WRAPPED_HEIGHT + SEGMENT_GAP) // (gantt + SEGMENT_GAP))
        segments = max(1, min(MAX_SEGMENTS, fit, math.ceil(natural / (WRAP_WIDTH - LEFT - RIGHT))))
    width = WRAP_WIDTH if segments > 1 else min(MAX_WIDTH, max(8.0, LEFT + RIGHT + natural))
    title = wrap_title(schedule, width)
    top = _top(title)
    gantt_total = segments * gantt + (segments - 1) * SEGMENT_GAP
    height = top + gantt_total + MEMORY_GAP + memory + BOTTOM
    return GanttLayout(width, height, gantt_total, memory, movers, panels, title, top, segments)


def _chunk_index(schedule: Schedule) -> dict[int, int]:
    return {stage: index for stages in schedule.problem.stages_of_device for index, stage in enumerate(stages)}


def _lane_rows(schedule: Schedule, movers: tuple[int, ...]) -> tuple[dict[tuple[int, str], tuple[float, float]],
                                                                      list, list]:
    """(device, lane) -> (y bottom, height) in inches from the top, and the y tick positions/labels."""
    rows, ticks, labels = {}, [], []
    y = 0.0
    for device in range(schedule.problem.devices):
        rows[(device, "compute")] = (y, COMPUTE_ROW)
        ticks.append(y + COMPUTE_ROW / 2)
        labels.append(f"dev {device}")
        y += COMPUTE_ROW
        if device in movers:
            for lane in schedule.problem.link_lanes:
                rows[(device, lane)] = (y, TRANSFER_ROW)
                ticks.append(y + TRANSFER_ROW / 2)
                labels.append(lane)
                y += TRANSFER_ROW
        y += DEVICE_GAP
    return rows, ticks, labels


def best_bound(schedule: Schedule) -> float:
    """The analytic lower bound, or the method's own when it proved a tighter one."""
    bound = makespan_lower_bound(schedule.problem).value
    if schedule.method.lower_bound is not None:
        bound = max(bound, float(schedule.method.lower_bound))
    return bound


def title_lines(schedule: Schedule) -> tuple[str, str]:
    """The headline figures, and a line describing the problem."""
    problem, method = schedule.problem, schedule.method
    bound = best_bound(schedule)
    makespan = schedule.makespan
    gap = max(0.0, (makespan - bound) / makespan) if makespan > 0 else 0.0
    peak = max(schedule.peak_memory, default=0.0)
    head = (f"{method.name} ({method.status})   makespan {makespan:g}   bound {bound:g} (gap {gap:.1%})   "
            f"bubble {schedule.bubble_ratio:.1%}   peak memory {peak:g}")
    caps = {c for c in problem.capacity}
    cap_text = ("unbounded" if caps == {None} else
                ", ".join("-" if c is None else f"{c:g}" for c in problem.capacity) if len(caps) > 1
                else f"{next(iter(caps)):g}")
    parts = [problem.name or "problem", f"{problem.devices} devices", f"{problem.microbatches} microbatches",
             f"{problem.chunks} chunk(s) {problem.placement_name}", f"{problem.backward_mode} backward",
             f"capacity {cap_text}"]
    if schedule.offloaded:
        parts.append(f"offloaded {schedule.offloaded:g}")
    if problem.per_microbatch:
        work = problem.microbatch_work
        slowest = max(range(len(work)), key=work.__getitem__)
        parts.append(f"slowest microbatch {slowest} ({work[slowest] / (sum(work) / len(work)):.2f}x the mean)")
    return head, "   ".join(parts)


def draw_gantt(schedule: Schedule, size: tuple[float, float] | None = None):
    """The Gantt chart and memory panels of ``schedule`` as a matplotlib Figure.

    A schedule too long for one row is wrapped: the time axis is cut into ``layout().segments``
    rows drawn one under the other; the memory panels below show the whole span.
    """
    from matplotlib.patches import Patch

    from ppsolve.plot.figure import new_figure

    problem = schedule.problem
    lay = layout(schedule, size)
    fig = new_figure(lay.width, lay.height)
    rows, ticks, labels = _lane_rows(schedule, lay.transfer_devices)
    gantt_units = sum(h for _, h in rows.values()) + DEVICE_GAP * problem.devices
    span = max(schedule.makespan, EPS)
    axes_w = max(0.1, lay.width - LEFT - RIGHT)

    def frac_x(inches: float) -> float:
        return inches / lay.width

    def frac_y(inches_from_top: float) -> float:
        return 1.0 - inches_from_top / lay.height

    row_h = (lay.gantt_height - (lay.segments - 1) * SEGMENT_GAP) / lay.segments
    piece = span / lay.segments
    axes = []
    for segment in range(lay.segments):
        y0 = lay.top + segment * (row_h + SEGMENT_GAP)
        ax = fig.add_axes((frac_x(LEFT), frac_y(y0 + row_h), axes_w / lay.width, row_h / lay.height))
        _draw_segment(ax, schedule, rows, (ticks, labels), gantt_units, segment * piece, (segment + 1) * piece,
                      axes_w)
        ax.tick_params(axis="x", labelbottom=lay.segments > 1, labelsize=7)
        axes.append(ax)

    legend = [Patch(facecolor=KIND_COLORS[k], label=k.value) for k in problem.kinds]
    if schedule.recomputed:
        legend.append(Patch(facecolor=KIND_COLORS[OpKind.R], label="R (recompute)"))
    if lay.lanes:
        legend += [Patch(facecolor=KIND_COLORS[k], label=k.value) for k in (OpKind.OFFLOAD, OpKind.RELOAD)]
    chunks = most_chunks(problem)
    if chunks > 1:
        legend += [Patch(facecolor=shade("#777777", c, chunks), label=f"chunk {c}") for c in range(chunks)]
    axes[0].legend(handles=legend, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(legend), frameon=False,
                   fontsize=8, handlelength=1.2, columnspacing=1.0, borderaxespad=0.2)
    head, sub = lay.title or wrap_title(schedule, lay.width)
    y = 0.22
    for line in head:
        fig.text(frac_x(LEFT), frac_y(y), line, fontsize=HEAD_FONT, weight="bold", va="center")
        y += 0.2
    y += 0.06
    for line in sub:
        fig.text(frac_x(LEFT), frac_y(y), line, fontsize=SUB_FONT, va="center", color="#333333")
        y += 0.16

    _draw_memory(fig, schedule, lay, frac_x, frac_y, axes_w, axes[0] if lay.segments == 1 else None)
    return fig


def _draw_segment(ax, schedule: Schedule, rows: dict, ticks: tuple[list, list], gantt_units: float,
                  x0: float, x1: float, axes_w: float) -> None:
    """The lanes of every device between times ``x0`` and ``x1``: boxes, microbatch labels, the bound."""
    problem = schedule.problem
    ax.set_xlim(x0, x1)
    ax.set_ylim(gantt_units, 0)
    ax.set_yticks(ticks[0])
    ax.set_yticklabels(ticks[1])
    for tick, label in zip(ax.get_yticklabels(), ticks[1]):
        tick.set_fontsize(8 if label.startswith("dev") else 6)
        if not label.startswith("dev"):
            tick.set_color("#555555")
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)

    chunk_of = _chunk_index(schedule)
    units_per_inch = (x1 - x0) / axes_w
    narrowest = MIN_BOX * units_per_inch
    shown = [op for op in schedule.ops if op.end >= x0 and op.start <= x1]
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for op in shown:
        y, h = rows[(op.device, schedule.problem.lane_name(op.kind))]
        color = shade(KIND_COLORS[op.kind], chunk_of.get(op.stage, 0), most_chunks(problem))
        groups.setdefault((y, h, color), []).append((op.start, max(op.duration, narrowest)))
    thin = narrowest > 0.3 * min((op.duration for op in schedule.ops if op.duration > 0), default=narrowest)
    for (y, h, color), spans in groups.items():
        ax.broken_barh(spans, (y + 0.01, h - 0.02), facecolors=[color], edgecolors="white",
                       linewidths=0.15 if thin else 0.4)

    # A label needs about 0.6 em per character plus a little padding.
    char_w = LABEL_FONT * 0.62 / 72 * units_per_inch
    for op in shown:
        text = str(op.microbatch)
        lane = schedule.problem.lane_name(op.kind)
        y, h = rows[(op.device, lane)]
        font = LABEL_FONT if lane == "compute" else LABEL_FONT * 0.8
        middle = op.start + op.duration / 2
        fits = op.duration >= char_w * len(text) * font / LABEL_FONT + 0.04 * units_per_inch and h * 72 >= font * 1.1
        if fits and x0 <= middle < x1:
            ax.text(middle, y + h / 2, text, ha="center", va="center", fontsize=font,
                    color="black" if lane == "compute" else "white")

    bound = best_bound(schedule)
    if 0 < bound < schedule.makespan and x0 <= bound <= x1:
        ax.axvline(bound, color="#333333", linestyle=":", linewidth=0.9)
        ax.text(bound, 1.0, " bound", transform=ax.get_xaxis_transform(), fontsize=7, va="bottom", color="#333333")


def _draw_memory(fig, schedule: Schedule, lay: GanttLayout, frac_x, frac_y, axes_w: float, gantt_ax) -> None:
    """One panel per device (or one shared panel for many devices): held memory and capacity."""
    problem = schedule.problem
    curves = memory_curves(problem, schedule.ops)
    span = max(schedule.makespan, EPS)
    peaks = schedule.peak_memory
    caps = [c for c in problem.capacity if c is not None]
    top = max([*peaks, *caps, EPS]) * 1.12
    time_unit, memory_unit = problem.units
    first = lay.top + lay.gantt_height + MEMORY_GAP
    panel_h = lay.memory_height / lay.memory_panels
    for panel in range(lay.memory_panels):
        y0 = first + panel * panel_h
        ax = fig.add_axes((frac_x(LEFT), frac_y(y0 + panel_h * 0.92), axes_w / lay.width, panel_h * 0.92 / lay.height),
                          sharex=gantt_ax)
        devices = [panel] if lay.memory_panels > 1 else list(range(problem.devices))
        for device in devices:
            times = [t for t, _ in curves[device]] + [span]
            levels = [level for _, level in curves[device]]
            levels.append(levels[-1])
            color = "#4C72B0" if lay.memory_panels > 1 else None
            line, = ax.step(times, levels, where="post", linewidth=1.0, color=color, label=f"dev {device}")
            if lay.memory_panels > 1:
                ax.fill_between(times, levels, step="post", alpha=0.25, color=line.get_color(), linewidth=0)
            cap = problem.capacity[device]
            if cap is not None and (lay.memory_panels > 1 or device == 0 or cap != problem.capacity[0]):
                ax.axhline(cap, color=CAPACITY_COLOR, linestyle="--", linewidth=0.9)
            if exceeds(peaks[device], cap):
                _mark_over_capacity(ax, times, levels, cap)
        ax.set_ylim(0, top)
        ax.set_xlim(0, span)
        ax.tick_params(labelsize=6.5)
        ax.grid(axis="x", color="#eeeeee", linewidth=0.5)
        if lay.memory_panels > 1:
            cap = problem.capacity[panel]
            over = exceeds(peaks[panel], cap)
            note = f"peak {peaks[panel]:g}" + ("" if cap is None else f" {'>' if over else '/'} cap {cap:g}")
            ax.text(1.005, 0.5, note, transform=ax.transAxes, ha="left", va="center", fontsize=6.5,
                    color=CAPACITY_COLOR if over else "#333333", weight="bold" if over else "normal")
            ax.set_ylabel(f"dev {panel}", fontsize=7, rotation=0, ha="right", va="center")
            ax.yaxis.set_label_coords(-0.42 / axes_w, 0.5)
            ax.locator_params(axis="y", nbins=2)
        else:
            ax.set_ylabel(f"memory ({memory_unit})", fontsize=8)
            ax.legend(fontsize=6, ncol=min(8, problem.devices), loc="upper right", frameon=False)
        if panel == 0:
            ax.set_title(f"memory held per device, in {memory_unit} (dashed: capacity; red: above it)",
                         fontsize=8, loc="left")
        if panel < lay.memory_panels - 1:
            ax.tick_params(axis="x", labelbottom=False)
        else:
            ax.set_xlabel(f"time ({time_unit})", fontsize=8)
            ax.tick_params(axis="x", labelbottom=True)


def _mark_over_capacity(ax, times: list[float], levels: list[float], cap: float) -> None:
    """Fill red where the memory held is above the capacity, and mark the highest point."""
    ax.fill_between(times, levels, cap, where=[level > cap for level in levels], step="post",
                    color=CAPACITY_COLOR, alpha=0.55, linewidth=0, interpolate=False)
    peak = max(range(len(levels)), key=levels.__getitem__)
    ax.plot([times[peak]], [levels[peak]], marker="v", color=CAPACITY_COLOR, markersize=5)


def plot_schedule(schedule: Schedule, path, size: tuple[float, float] | None = None, dpi: float = 100) -> None:
    """Draw ``schedule`` and write the image (format from the extension) atomically."""
    from ppsolve.plot.figure import image_format, save_figure

    image_format(path)
    save_figure(draw_gantt(schedule, size), path, dpi)
