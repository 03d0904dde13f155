"""docs/cli.md, the command reference, rendered from the command line's own parsers.

Run from the repository root: ``python -m docs.cli_reference > docs/cli.md``.
tests/studies/test_cli_reference.py fails when docs/cli.md differs from what this prints.
What a parser cannot say (the page that owns a command's topic, a note beside ``--help``) is in PAGES and
NOTES below.
"""

from __future__ import annotations

import argparse

from ppsolve.cli import build_parser

# The page that owns each command's topic (its examples, figures and how to re-measure them).
PAGES = {
    "baseline": "baselines.md",
    "solve": "solver.md",
    "check": "SPEC.md#how-a-runtime-executes-a-schedule-contract-version-2",
    "bound": "solver.md#the-lower-bound-ppsolvebounds",
    "schema": "SPEC.md",
    "plot": "viz.md",
    "export": "viz.md",
    "bench": "viz.md",
    "frontier": "viz.md",
    "run": "executor.md",
    "profile": "executor.md",
    "problem": "costmodel.md",
}

# Notes that add to --help: what a command prints, where its other pages are.
NOTES = {
    "check": """Each violation names the rule (`R1`..`R7`, `R9`, `R10` as numbered in the contract, `complete`,
`device`, `duration`, `start`, `amount`, `memory`, `retime`), the op and the numbers; order problems show the
ops around the spot on each device involved:

```
$ ppsolve check broken.json       # a 1F1B schedule with B(0,1) moved 0.25 earlier
broken.json: method 1f1b-by-hand, makespan 16, bubble 25.0%, peak memory [3, 2, 1], offloaded 0
re-timed by the runtime rules: makespan 16, peak memory [3, 2, 1]
[R3] B(0,1) starts at 7.75, before B(1,1) ends at 8 (its output gradient)
    device 0: B(0,0) 5-6 | W(0,0) 6-7 | F(0,3) 7-8 | >B(0,1) 7.75-8.75< | W(0,1) 9-10 | B(0,2) 11-12 | W(0,2) 12-13
    device 1: B(1,0) 4-5 | W(1,0) 5-6 | F(1,2) 6-7 | >B(1,1) 7-8< | W(1,1) 8-9 | F(1,3) 9-10 | B(1,2) 10-11
[R6] B(0,1) starts at 7.75 while F(0,3) runs until 8 on device 0
    device 0: F(0,2) 2-3 | B(0,0) 5-6 | W(0,0) 6-7 | >F(0,3) 7-8< | >B(0,1) 7.75-8.75< | W(0,1) 9-10 | B(0,2) 11-12
INVALID: 2 violation(s)
```

Re-timing follows the contract's runtime rules: each device issues its actions in the order of planned
start; an action starts once its inputs are there, the action before it on its lane (compute, or a link
direction) has ended, and every action of its device planned to end by its planned start has ended. So a
valid schedule always runs as planned: a re-timed makespan later than planned, or a re-timed peak above the
planned one, would be a bug in ppsolve, and is reported as such (*not executable*, exit 1). `--json` prints
`{"valid", "executable", "violations", "makespan", "peak_memory", "bubble_ratio", "offloaded", "recomputed",
"retimed": {"makespan", "peak_memory"}}`.""",
    "export": "`--to torch`: [pytorch-runtime.md](pytorch-runtime.md); `--to torchtitan`: "
              "[torchtitan.md](torchtitan.md).",
    "run": "`--runtime torch`: [pytorch-runtime.md](pytorch-runtime.md); `--runtime torchtitan`: "
           "[torchtitan.md](torchtitan.md).",
    "problem": "`--documents`: [costmodel.md](costmodel.md#one-steps-documents---documents---pack-"
               "ppsolvecostmodeldocumentspy-packingpy) and [per-microbatch.md](per-microbatch.md).",
}

HEADER = """# Command reference

Every command and option, as `ppsolve COMMAND --help` prints them; the page named under each command has
its examples and figures. This page is generated from the parsers (`python -m docs.cli_reference >
docs/cli.md`, from the repository root); `tests/studies/test_cli_reference.py` fails when it differs.

Exit codes everywhere: 0 success, 1 a check failed (invalid schedule, gradient mismatch), 2 bad input or a
method that does not apply (one line naming the field or the reason), 3 infeasible (with the least memory cap
that could work), 4 no schedule found in the time limit. Every output file is written atomically: a failure
or Ctrl-C never leaves a half-written file.
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest.upper()


def _argument(action: argparse.Action) -> str:
    """How the argument is written, e.g. ``-o``, ``--output OUTPUT`` or ``PROBLEM ...``."""
    if not action.option_strings:
        more = {"?": " (optional)", "*": " ...", "+": " ..."}.get(action.nargs, "")  # type: ignore[arg-type]
        return f"`{_metavar(action)}`{more}".replace("|", "\\|")
    value = "" if action.nargs == 0 else f" {_metavar(action)}"
    return ", ".join(f"`{option}{value}`" for option in action.option_strings).replace("|", "\\|")


def _meaning(action: argparse.Action) -> str:
    text = (action.help or "") % {**vars(action), "prog": "ppsolve"}  # as argparse expands %(default)s, %%
    if action.required and action.option_strings:
        text += " (required)"
    shown = action.default not in (None, False, argparse.SUPPRESS)
    if shown and action.nargs != 0 and "default" not in text.lower() and f"({action.default})" not in text:
        default = f"{action.default:g}" if isinstance(action.default, float) else action.default
        text += f" (default {default})"
    return _cell(text)


def _synopsis(name: str, parser: argparse.ArgumentParser) -> str:
    words = [f"ppsolve {name}"]
    for action in parser._actions:
        if not action.option_strings and action.nargs != "?":
            words.append(_metavar(action) + (" ..." if action.nargs in ("*", "+") else ""))
        elif not action.option_strings:
            words.append(f"[{_metavar(action)}]")
        elif action.required:
            words.append(f"{action.option_strings[0]} {_metavar(action)}")
    return " ".join(words) + " [options]"


def _tables(parser: argparse.ArgumentParser) -> list[str]:
    """One table of argparse's own two groups (positional arguments, options), then one per named group."""
    groups = [("", parser._action_groups[0]._group_actions + parser._action_groups[1]._group_actions)]
    groups += [(f"{g.title[0].upper()}{g.title[1:]}:\n\n", g._group_actions) for g in parser._action_groups[2:]]
    out = []
    for title, actions in groups:
        rows = "".join(f"| {_argument(a)} | {_meaning(a)} |\n" for a in actions
                       if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction))
        if rows:
            out.append(f"{title}| argument | meaning |\n|---|---|\n{rows}")
    return out


def _section(name: str, helptext: str, parser: argparse.ArgumentParser) -> str:
    sentence = _cell(helptext)
    parts = [f"## `ppsolve {name}`\n", f"{sentence[:1].upper()}{sentence[1:]}.\n",
             f"```\n{_synopsis(name, parser)}\n```\n"]
    if parser.description:
        parts.append(" ".join(parser.description.split()) + "\n")
    parts += _tables(parser)
    if name in NOTES:
        parts.append(NOTES[name] + "\n")
    parts.append(f"More: [{PAGES[name].split('#')[0]}]({PAGES[name]}).\n")
    return "\n".join(parts)


def every_command() -> list[tuple[str, str, argparse.ArgumentParser]]:
    root = build_parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in sub._choices_actions}
    return [(name, helps[name], parser) for name, parser in sub.choices.items()]


def markdown() -> str:
    """docs/cli.md as it should read."""
    commands = every_command()
    index = "| command | what it does |\n|---|---|\n" + "".join(
        f"| [`{name}`](#ppsolve-{name}) | {_cell(helptext)} |\n" for name, helptext, _ in commands)
    return "\n".join([HEADER, index] + [_section(*command) for command in commands])


if __name__ == "__main__":
    print(markdown(), end="")
