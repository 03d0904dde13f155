"""``ppsolve export SCHEDULE.json --to FORMAT -o OUT``: a schedule in another tool's format."""

from __future__ import annotations

import argparse

from ppsolve.export import EXPORTERS, get_exporter
from ppsolve.schedule import load_schedule


def add_parser(subparsers) -> argparse.ArgumentParser:
    formats = "; ".join(f"{e.name}: {e.description}" for e in EXPORTERS.values())
    parser = subparsers.add_parser("export", help="write a schedule in another tool's format",
                                   description=f"Formats: {formats}.")
    parser.add_argument("schedule", help="schedule file (ppsolve/schedule@1)")
    parser.add_argument("--to", required=True, metavar="FORMAT", help=f"one of: {', '.join(EXPORTERS)}")
    parser.add_argument("-o", "--output", required=True, help="file to write (torchtitan: a directory)")
    parser.add_argument("--unit-us", type=float, default=None,
                        help="chrome-trace: microseconds per time unit of the problem (default 1000: times are ms)")
    parser.add_argument("--format", choices=("compute_comms", "compute_only"), default=None,
                        help="torch: compute_comms (default: sends and receives placed by ppsolve) or compute_only "
                             "(PyTorch places them); either way a side file for offload and recompute, "
                             "s.csv -> s.plan.json")
    return parser


def require_valid(schedule, path: str) -> None:
    """Refuse a schedule the checker finds invalid, as ``check`` does (exit 1), in one line."""
    from ppsolve.checker import check
    from ppsolve.errors import InvalidScheduleError

    report = check(schedule)
    if not report.valid:
        first = next(v for v in report.violations if v.rule != "retime")
        raise InvalidScheduleError(f"{path}: INVALID, not exported: [{first.rule}] {first.message} "
                                   f"({len(report.violations)} violation(s): ppsolve check {path} lists them)")


def run(args: argparse.Namespace) -> int:
    from ppsolve.errors import InputError
    from ppsolve.jsonio import require_directory
    from ppsolve.limits import MAX_MAGNITUDE, MIN_MAGNITUDE

    exporter = get_exporter(args.to)
    options = {}
    if args.unit_us is not None:
        if exporter.name != "chrome-trace":
            raise InputError("--unit-us", f"only applies to --to chrome-trace, not {exporter.name}")
        if not MIN_MAGNITUDE <= args.unit_us <= MAX_MAGNITUDE:  # times up to 1e18 stay finite in the trace
            raise InputError("--unit-us", f"must be between {MIN_MAGNITUDE:g} and {MAX_MAGNITUDE:g}, "
                                          f"got {args.unit_us:g}")
        options["unit_us"] = args.unit_us
    if args.format is not None:
        if exporter.name != "torch":
            raise InputError("--format", f"only applies to --to torch, not {exporter.name}")
        options["format"] = args.format
    require_directory(args.output)
    schedule = load_schedule(args.schedule)
    require_valid(schedule, args.schedule)
    if exporter.name == "torchtitan":
        from ppsolve.export.torchtitan import export_torchtitan
        print(export_torchtitan(schedule, args.output).summary())
        return 0
    written = exporter.write(schedule, args.output, **options)
    extra = [str(p) for p in (written or [])[1:]]
    fmt = f", {options.get('format', 'compute_comms')}" if exporter.name == "torch" else ""
    print(f"wrote {args.output} ({exporter.name}{fmt})" + (f" and {', '.join(extra)}" if extra else ""))
    return 0
