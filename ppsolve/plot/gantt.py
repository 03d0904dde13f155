"""Gantt chart of a schedule: per device its compute lane (and host-link lanes), memory below.

Ops are coloured by kind, the chunk (which of the device's stages) by shade, and
the microbatch number is written in a box when it fits. Below, one panel per
device draws its held memory over time with its capacity; the title carries the
method, makespan, bound and gap, bubble ratio and peak memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.bounds import makespan_lower_bound
from ppsolve.memory import memory_curves
from ppsolve.ops import OpKind
from ppsolve.schedule import Schedule, ScheduledOp

KIND_COLORS = {
    OpKind.F: "#4C72B0",
    OpKind.B: "#DD8452",
    OpKind.W: "#55A868",
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
SEPARATE_MEMORY_PANELS = 16  # above this many devices, memory shares one panel
LABEL_FONT = 5.5


@dataclass(frozen=True)
class GanttLayout:
    """Figure size and where each lane sits (y in row units, 1 = a compute row)."""

    width: float
    height: float
    gantt_height: float
    memory_height: float
    lanes: bool
    memory_panels: int


def shade(color: str, chunk: int, chunks: int) -> tuple[float, float, float]:
    """``color`` for chunk 0, mixed with more white for each later chunk of a device."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    mix = 0.0 if chunks <= 1 else 0.6 * chunk / (chunks - 1)
    return (r + (1 - r) * mix, g + (1 - g) * mix, b + (1 - b) * mix)


def has_transfer_lanes(schedule: Schedule) -> bool:
    """Draw d2h/h2d lanes when the problem can offload or the schedule moves anything."""
    return schedule.problem.can_offload or any(op.kind.is_transfer for op in schedule.ops)


def layout(schedule: Schedule, size: tuple[float, float] | None = None) -> GanttLayout:
    """A size that keeps the shortest op's label readable, within sensible limits."""
    problem = schedule.problem
    lanes = has_transfer_lanes(schedule)
    d = problem.devices
    row = COMPUTE_ROW + (2 * TRANSFER_ROW if lanes else 0.0) + DEVICE_GAP
    gantt = d * row
    panels = d if d <= SEPARATE_MEMORY_PANELS else 1
    memory = d * MEMORY_ROW if panels > 1 else 2.5
    if size is not None:
        width, height = size
        scale = max(0.05, height - TOP - BOTTOM - MEMORY_GAP) / (gantt + memory)
        return GanttLayout(width, height, gantt * scale, memory * scale, lanes, panels)
    durations = [op.duration for op in schedule.ops if op.kind.is_compute and op.duration > 0]
    shortest = min(durations, default=1.0)
    span = max(schedule.makespan, shortest)
    width = min(MAX_WIDTH, max(8.0, LEFT + RIGHT + MIN_OP_WIDTH * span / shortest))
    height = TOP + gantt + MEMORY_GAP + memory + BOTTOM
    return GanttLayout(width, height, gantt, memory, lanes, panels)


def _chunk_index(schedule: Schedule) -> dict[int, int]:
    return {stage: index for stages in schedule.problem.stages_of_device for index, stage in enumerate(stages)}


def _lane_rows(schedule: Schedule, lanes: bool) -> tuple[dict[tuple[int, str], tuple[float, float]], list, list]:
    """(device, lane) -> (y bottom, height) in inches from the top, and the y tick positions/labels."""
    rows, ticks, labels = {}, [], []
    y = 0.0
    for device in range(schedule.problem.devices):
        rows[(device, "compute")] = (y, COMPUTE_ROW)
        ticks.append(y + COMPUTE_ROW / 2)
        labels.append(f"dev {device}")
        y += COMPUTE_ROW
        if lanes:
            for lane in ("d2h", "h2d"):
                rows[(device, lane)] = (y, TRANSFER_ROW)
                ticks.append(y + TRANSFER_ROW / 2)
                labels.append(lane)
                y += TRANSFER_ROW
        y += DEVICE_GAP
    return rows, ticks, labels


def _lane_of(op: ScheduledOp) -> str:
    if op.kind is OpKind.OFFLOAD:
        return "d2h"
    if op.kind is OpKind.RELOAD:
        return "h2d"
    return "compute"


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
    return head, "   ".join(parts)


def draw_gantt(schedule: Schedule, size: tuple[float, float] | None = None):
    """The Gantt chart and memory panels of ``schedule`` as a matplotlib Figure."""
    from matplotlib.patches import Patch

    from ppsolve.plot.figure import new_figure

    problem = schedule.problem
    lay = layout(schedule, size)
    fig = new_figure(lay.width, lay.height)
    rows, ticks, labels = _lane_rows(schedule, lay.lanes)
    gantt_units = sum(h for _, h in rows.values()) + DEVICE_GAP * problem.devices
    span = max(schedule.makespan, 1e-9)

    axes_w = max(0.1, lay.width - LEFT - RIGHT)

    def frac_x(inches: float) -> float:
        return inches / lay.width

    def frac_y(inches_from_top: float) -> float:
        return 1.0 - inches_from_top / lay.height

    ax = fig.add_axes((frac_x(LEFT), frac_y(TOP + lay.gantt_height), axes_w / lay.width, lay.gantt_height / lay.height))
    ax.set_xlim(0, span)
    ax.set_ylim(gantt_units, 0)
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels)
    for tick, label in zip(ax.get_yticklabels(), labels):
        tick.set_fontsize(8 if label.startswith("dev") else 6)
        if not label.startswith("dev"):
            tick.set_color("#555555")
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)

    chunk_of = _chunk_index(schedule)
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for op in schedule.ops:
        lane = _lane_of(op)
        y, h = rows[(op.device, lane)]
        color = shade(KIND_COLORS[op.kind], chunk_of.get(op.stage, 0), problem.chunks)
        groups.setdefault((y, h, color), []).append((op.start, op.duration))
    for (y, h, color), spans in groups.items():
        ax.broken_barh(spans, (y + 0.01, h - 0.02), facecolors=[color], edgecolors="white", linewidths=0.4)

    # A label needs about 0.6 em per character plus a little padding.
    units_per_inch = span / axes_w
    char_w = LABEL_FONT * 0.62 / 72 * units_per_inch
    for op in schedule.ops:
        text = str(op.microbatch)
        lane = _lane_of(op)
        y, h = rows[(op.device, lane)]
        font = LABEL_FONT if lane == "compute" else LABEL_FONT * 0.8
        if op.duration >= char_w * len(text) * font / LABEL_FONT + 0.04 * units_per_inch and h * 72 >= font * 1.1:
            ax.text(op.start + op.duration / 2, y + h / 2, text, ha="center", va="center", fontsize=font,
                    color="black" if lane == "compute" else "white")

    legend = [Patch(facecolor=KIND_COLORS[k], label=k.value) for k in problem.kinds]
    if lay.lanes:
        legend += [Patch(facecolor=KIND_COLORS[k], label=k.value) for k in (OpKind.OFFLOAD, OpKind.RELOAD)]
    if problem.chunks > 1:
        legend += [Patch(facecolor=shade("#777777", c, problem.chunks), label=f"chunk {c}")
                   for c in range(problem.chunks)]
    ax.legend(handles=legend, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(legend), frameon=False,
              fontsize=8, handlelength=1.2, columnspacing=1.0, borderaxespad=0.2)
    head, sub = title_lines(schedule)
    fig.text(frac_x(LEFT), frac_y(0.22), head, fontsize=11, weight="bold", va="center")
    fig.text(frac_x(LEFT), frac_y(0.48), sub, fontsize=8.5, va="center", color="#333333")
    ax.tick_params(axis="x", labelbottom=False)
    bound = best_bound(schedule)
    if 0 < bound < span:
        ax.axvline(bound, color="#333333", linestyle=":", linewidth=0.9)
        ax.text(bound, 1.0, " bound", transform=ax.get_xaxis_transform(), fontsize=7, va="bottom", color="#333333")

    _draw_memory(fig, schedule, lay, frac_x, frac_y, axes_w, ax)
    return fig


def _draw_memory(fig, schedule: Schedule, lay: GanttLayout, frac_x, frac_y, axes_w: float, gantt_ax) -> None:
    """One panel per device (or one shared panel for many devices): held memory and capacity."""
    problem = schedule.problem
    curves = memory_curves(problem, schedule.ops)
    span = max(schedule.makespan, 1e-9)
    peaks = schedule.peak_memory
    caps = [c for c in problem.capacity if c is not None]
    top = max([*peaks, *caps, 1e-9]) * 1.12
    first = TOP + lay.gantt_height + MEMORY_GAP
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
        ax.set_ylim(0, top)
        ax.set_xlim(0, span)
        ax.tick_params(labelsize=6.5)
        ax.grid(axis="x", color="#eeeeee", linewidth=0.5)
        if lay.memory_panels > 1:
            cap = problem.capacity[panel]
            note = f"peak {peaks[panel]:g}" + ("" if cap is None else f" / cap {cap:g}")
            ax.text(1.005, 0.5, note, transform=ax.transAxes, ha="left", va="center", fontsize=6.5, color="#333333")
            ax.set_ylabel(f"dev {panel}", fontsize=7, rotation=0, ha="right", va="center")
            ax.yaxis.set_label_coords(-0.42 / axes_w, 0.5)
            ax.locator_params(axis="y", nbins=2)
        else:
            ax.set_ylabel("memory", fontsize=8)
            ax.legend(fontsize=6, ncol=min(8, problem.devices), loc="upper right", frameon=False)
        if panel == 0:
            ax.set_title("memory held per device (dashed: capacity)", fontsize=8, loc="left")
        if panel < lay.memory_panels - 1:
            ax.tick_params(axis="x", labelbottom=False)
        else:
            ax.set_xlabel("time", fontsize=8)
            ax.tick_params(axis="x", labelbottom=True)


def plot_schedule(schedule: Schedule, path, size: tuple[float, float] | None = None, dpi: float = 100) -> None:
    """Draw ``schedule`` and write the image (format from the extension) atomically."""
    from ppsolve.plot.figure import image_format, save_figure

    image_format(path)
    save_figure(draw_gantt(schedule, size), path, dpi)
