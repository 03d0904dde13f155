"""``ppsolve plot SCHEDULE.json -o OUT.{png,svg,pdf}``: Gantt chart with memory over time."""

from __future__ import annotations

import argparse

from ppsolve.schedule import load_schedule


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "plot", help="draw a schedule as a Gantt chart with memory over time (PNG, SVG or PDF)",
        description="One row per device (compute lane, plus d2h/h2d lanes when the problem offloads), "
                    "ops coloured by kind and shaded by chunk, memory per device below.")
    parser.add_argument("schedule", help="schedule file (ppsolve/schedule@1)")
    parser.add_argument("-o", "--output", required=True, help="image file: .png, .svg or .pdf")
    parser.add_argument("--size", help="figure size in inches, WIDTHxHEIGHT (default: from the schedule's size)")
    parser.add_argument("--dpi", type=float, default=100, help="pixels per inch for PNG (default 100)")
    return parser


def parse_size(text: str | None) -> tuple[float, float] | None:
    """``--size``: 'WxH' in inches (e.g. '12x8') to a (width, height) pair; None stays None."""
    from ppsolve.errors import InputError

    if text is None:
        return None
    try:
        width, height = (float(part) for part in text.lower().split("x"))
    except ValueError:
        raise InputError("--size", f"must be WIDTHxHEIGHT in inches, e.g. 12x8, got {text!r}") from None
    if not (0.5 <= width <= 200 and 0.5 <= height <= 200):
        raise InputError("--size", f"each side must be between 0.5 and 200 inches, got {text!r}")
    return width, height


def run(args: argparse.Namespace) -> int:
    from ppsolve.errors import InputError
    from ppsolve.jsonio import require_directory
    from ppsolve.plot.figure import image_format
    from ppsolve.plot.gantt import plot_schedule

    image_format(args.output, "--output")
    require_directory(args.output)
    size = parse_size(args.size)
    if not 10 <= args.dpi <= 1200:
        raise InputError("--dpi", f"must be between 10 and 1200, got {args.dpi:g}")
    schedule = load_schedule(args.schedule)
    plot_schedule(schedule, args.output, size=size, dpi=args.dpi)
    print(f"wrote {args.output}")
    return 0
