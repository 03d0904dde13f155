"""The ``ppsolve`` command line: a thin layer, one library call per subcommand.

Each subcommand lives in ``ppsolve/commands/<name>.py`` with ``add_parser(subparsers)``
and ``run(args) -> int``; COMMANDS lists them in the order ``--help`` shows.
Errors become one line on stderr, naming the flags the user typed (``commands.flags``), and an exit
code (2 bad input, 3 infeasible).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
import time
from typing import Sequence

from ppsolve import __version__
from ppsolve.commands.flags import cli_text
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
        sub.set_defaults(handler=module.run, parser=sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``; a misspelled command or option exits 2 with that command's usage and a suggestion."""
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        close = difflib.get_close_matches(argv[0], COMMANDS, n=1)
        if close:
            parser.error(f"unknown command '{argv[0]}' (did you mean '{close[0]}'?)")
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub: argparse.ArgumentParser = args.parser
        options = [s for action in sub._actions for s in action.option_strings]
        unknown = next((e for e in extra if e.startswith("-")), extra[0])
        close = difflib.get_close_matches(unknown.split("=")[0], options, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        sub.error(f"unrecognized argument{'s' if len(extra) > 1 else ''}: {' '.join(extra)}{hint}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    started = time.monotonic()  # the command's own work starts here: a time limit counts from it
    parser = build_parser()
    args = _parse(parser, list(sys.argv[1:] if argv is None else argv))
    args.started = started
    try:
        return int(args.handler(args) or 0)
    except PpsolveError as exc:
        print(f"ppsolve {args.command}: error: {one_line(cli_text(exc, args.parser))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"ppsolve {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a file system problem not caught closer to its cause
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"ppsolve {args.command}: error: {one_line(f'{where}{exc.strerror or exc}')}", file=sys.stderr)
        return 2


def one_line(text: str) -> str:
    """``text`` with every character that is not printable (a newline in a field name or a path, a lone
    surrogate) written as its escape, so that an error stays one line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def entry() -> None:
    sys.exit(main())
