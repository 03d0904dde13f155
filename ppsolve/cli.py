"""The ``ppsolve`` command line: a thin layer, one library call per subcommand.

Each subcommand lives in ``ppsolve/commands/<name>.py`` with ``add_parser(subparsers)``
and ``run(args) -> int``; COMMANDS lists them in the order ``--help`` shows.
Errors become one line on stderr and an exit code (2 bad input, 3 infeasible).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from ppsolve import __version__
from ppsolve.errors import PpsolveError

COMMANDS = [
    "baseline",
    "solve",
    "check",
    "bound",
    "schema",
    "plot",
    "export",
    "bench",
    "frontier",
    "run",
    "profile",
    "problem",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ppsolve", description="Pipeline-parallel schedules: find, prove, run.")
    parser.add_argument("--version", action="version", version=f"ppsolve {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"ppsolve.commands.{name.replace('-', '_')}")
        sub = module.add_parser(subparsers)
        sub.set_defaults(handler=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except PpsolveError as exc:
        print(f"ppsolve {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"ppsolve {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a file system problem not caught closer to its cause
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"ppsolve {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


def entry() -> None:
    sys.exit(main())
