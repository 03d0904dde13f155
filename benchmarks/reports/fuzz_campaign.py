"""A fuzz campaign of every ppsolve command: seeded random and damaged inputs, each run in a forked child.

    python -m benchmarks.reports.fuzz_campaign --runs 3000 --seed 1

The parent imports ppsolve (and its solver, plotting and cost-model modules) once; each run is a child
forked from it that calls ``ppsolve.cli.main(argv)`` under a 4 GiB address-space limit (RLIMIT_AS) and
is killed at its time limit + 15 s (``--time-limit`` of a solve, bench or frontier; 0 for the others).
Inputs: random problems (sizes, placements, uneven times, caps, offload links, recompute) and the
bundled instances, with 0-3 changes each: tiny and huge numbers together, a capacity in bytes beside
activations in GiB, NaN, wrong types, unknown fields (newlines and control characters in their names),
``$`` and lone surrogates in names and units, a placement that leaves a device without a stage, every
time 0, a capacity below one activation, list lengths, deep nesting, cut text; schedules written by
earlier runs, damaged (many duplicated ops, dropped ops, shifted times, odd amounts); odd options and
paths (newlines, missing directories). Every schedule a run writes is checked by ``ppsolve check`` in
the same child.

Witness runs (``COMMAND*`` in the summary; ``fuzz_witness``, written apart from ppsolve and its tests):
a valid odd problem (zero-length ops, tiny numbers, dust offloads, recompute that saves nothing) with a
schedule that is valid by the contract's own reading. ``check`` must accept the witness with no metric
warning; ``export``, ``plot`` and ``run`` (both runtimes, with the gradient check) must take it; ``solve``
and ``bound`` may not call the problem infeasible, nor prove an optimum or a bound above the witness's
makespan, and ``solve`` warm-started from the witness may not end above it. Each breach counts as a
wrong answer.

Counts, per command and in all: tracebacks (an exception that escaped ``main``), runs whose peak RSS
passed 4 GiB or that ran out of memory, runs over their time limit + 15 s, runs whose error was not one
line, schedules written that ``check`` refused, wrong answers on witness problems. Exits 1 if any.
``--list-failures`` prints each.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import math
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

import matplotlib  # imported before forking: each child starts warm

from benchmarks.harness import ROOT
from benchmarks.reports.fuzz_witness import odd_problem, witness

matplotlib.use("Agg")
import ppsolve.commands.plot  # noqa: E402,F401
import ppsolve.plot.gantt  # noqa: E402,F401
import ppsolve.solvers.cpsat.backend  # noqa: E402,F401
import ppsolve.studies.advice  # noqa: E402,F401
import ppsolve.studies.bench  # noqa: E402,F401
import ppsolve.studies.frontier  # noqa: E402,F401
from ppsolve.cli import build_parser, main  # noqa: E402

build_parser()  # imports every command module
MEMORY_LIMIT = 4 * 1024 ** 3
GRACE = 15.0  # seconds past a run's own time limit before it counts as a runaway
INSTANCES = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "instances").glob("*.json"))
MODELS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "models/transformers").glob("*.json"))
TINY = [5e-324, 1e-300, 1e-13, 1e-12, 1e-9, 1e-6]
HUGE = [1e12, 8.6e10, 1e11, 1e15, 1e308, 2 ** 63, 10 ** 400]
ODD_TEXT = ["$x^2$", "$$", "a\nb", "\x00\x1b[31m", "\ud800", "tab\there", "\u202e$", "é$ü", "\r\n"]
METHODS = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "dualpipe-v", "gis",
           "gis-h", "po-h", "po-f", "1f1b-offload", "1f1b-recompute", "1f1b-adapipe", "greedy", "nope"]


# ---------------------------------------------------------------------------------------- inputs

def random_problem(rng: random.Random) -> dict:
    """A random problem file's content (mostly valid)."""
    devices = rng.choice([1, 2, 2, 3, 4, 4, 6, 8])
    chunks = rng.choice([1, 1, 1, 2, 2, 4])
    placement = "linear" if chunks == 1 else rng.choice(["interleaved", "vshape"])
    if placement == "vshape" and chunks % 2:
        chunks = 2
    stages = devices * chunks
    m = rng.choice([1, 2, 3, 4, 8, 12, 16, 24, 32])
    split = rng.random() < 0.7

    def per_stage(low: float, high: float):
        if rng.random() < 0.5:
            return round(rng.uniform(low, high), rng.choice([0, 1, 3]))
        return [round(rng.uniform(low, high), rng.choice([0, 1, 3])) for _ in range(stages)]

    activation = per_stage(0.5, 2)
    data = {"format": "ppsolve/problem@1", "name": f"fuzz {devices}x{m}", "devices": devices, "microbatches": m,
            "chunks": chunks, "placement": placement, "backward": "split" if split else "fused",
            "time": {"forward": per_stage(1, 10), "backward_input": per_stage(1, 12),
                     "backward_weight": per_stage(0.5, 8), "p2p": rng.choice([0, 0, 0.5, 1])},
            "memory": {"activation": activation, "capacity": rng.choice([None, 1, 1.5, 2, 3, 4, 8, 1e3])}}
    if split and rng.random() < 0.5:
        data["memory"]["weight_hold"] = round(rng.uniform(0, 0.5), 2)
    if rng.random() < 0.4:
        data["offload"] = {"fraction": rng.choice([1, 0.5, [rng.choice([0, 0.5, 1]) for _ in range(stages)]]),
                           "bandwidth": {"d2h": rng.choice([0.1, 0.2, 1, 5]), "h2d": rng.choice([0.1, 0.2, 1, 5])},
                           "duplex": rng.random() < 0.7}
        if devices >= 2 and rng.random() < 0.3:
            data["offload"]["links"] = [list(range(0, devices, 2)), list(range(1, devices, 2))]
    if rng.random() < 0.3:
        data["recompute"] = {"keep": round(rng.uniform(0, 0.5), 2)}
    return data


def _numbers(value, path=()):
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _numbers(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _numbers(v, (*path, i))]
    return [path] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def _places(value, path=()):
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _places(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:6]):
            out += _places(v, (*path, i))
    return out


def _set(data, path, value):
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def change_problem(rng: random.Random, data: dict) -> str:
    """Apply a change of the issue's list (or a generic damage) to a problem dict; returns its name."""
    kind = rng.choice(["tiny_huge", "bytes_cap", "big_ratio", "odd_name", "odd_key", "empty_device", "zero_times",
                       "low_cap", "value", "delete", "length", "nest", "nan", "type", "huge_count", "no_offload"])
    time_, memory = data.get("time", {}), data.get("memory", {})
    numbers = [p for p in _numbers(data) if p and p[0] in ("time", "memory", "offload", "recompute")]
    if kind == "tiny_huge" and numbers:
        _set(data, rng.choice(numbers), rng.choice(TINY))
        _set(data, rng.choice(numbers), rng.choice(HUGE[:3]))
    elif kind == "bytes_cap":
        memory["capacity"] = 8.6e10
    elif kind == "big_ratio":
        memory["activation"], memory["capacity"] = 1, rng.choice([1e12, 1e9, 5e4])
        memory.pop("weight_hold", None)
    elif kind == "odd_name":
        data[rng.choice(["name", "x-units"])] = (rng.choice(ODD_TEXT) if rng.random() < 0.5
                                                  else {"time": rng.choice(ODD_TEXT), "memory": rng.choice(ODD_TEXT)})
    elif kind == "odd_key":
        target = rng.choice([data, time_, memory])
        target[rng.choice(["fo\nrward", "x\r", "capac\x00ity", "$", "\ud800", "forwrd"])] = 1
    elif kind == "empty_device" and isinstance(data.get("devices"), int) and 2 <= data["devices"] <= 64 \
            and isinstance(data.get("chunks", 1), int) and 1 <= data.get("chunks", 1) <= 8:
        d, v = data["devices"], data.get("chunks", 1)
        data["placement"] = [1 + s % (d - 1) for s in range(d * v)]
    elif kind == "zero_times":
        for key in ("forward", "backward_input", "backward_weight", "p2p"):
            time_[key] = 0
    elif kind == "low_cap":
        act = memory.get("activation", 1)
        least = min(act) if isinstance(act, list) and act else act
        if isinstance(least, (int, float)):
            memory["capacity"] = least * rng.choice([0, 0.5, 0.99])
    elif kind == "nan" and numbers:
        _set(data, rng.choice(numbers), rng.choice([math.nan, math.inf, -math.inf, -1, -1e-300]))
    elif kind in ("value", "type", "delete", "length", "nest"):
        path = rng.choice([p for p in _places(data) if p])
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        key = path[-1]
        if kind == "delete":
            del parent[key]
        elif kind == "length" and isinstance(parent[key], list) and parent[key]:
            parent[key] = parent[key][:-1] if rng.random() < 0.5 else parent[key] + parent[key][-1:]
        elif kind == "nest":
            value = parent[key]
            for _ in range(rng.choice([1, 5, 40])):
                value = [value]
            parent[key] = value
        else:
            parent[key] = rng.choice([None, True, "3", [], {}, -1, 0, 10 ** 30, 1.5, [1, 2], rng.choice(TINY)])
    elif kind == "huge_count":
        data[rng.choice(["devices", "microbatches", "chunks"])] = rng.choice([0, 1025, 16385, 10 ** 9, 97])
    elif kind == "no_offload":
        data.pop("offload", None)
    return kind


def change_schedule(rng: random.Random, data: dict) -> str:
    """Damage a schedule dict written by an earlier run; returns the change's name."""
    ops = data.get("ops") or []
    kind = rng.choice(["duplicates", "drop", "shift", "amount", "huge_time", "odd_name", "no_offload", "problem",
                       "none", "none"])
    if kind == "duplicates" and ops:
        start = rng.randrange(len(ops))
        data["ops"] = ops + copy.deepcopy(ops[start:start + rng.randint(1, len(ops))]) * rng.choice([1, 1, 3])
    elif kind == "drop" and ops:
        del ops[rng.randrange(len(ops))]
    elif kind == "shift" and ops:
        op = rng.choice(ops)
        by = rng.choice([-1, 0.5, 1e-9, 1e6])
        op["start"], op["end"] = op["start"] + by, op["end"] + by
    elif kind == "amount":
        movers = [op for op in ops if "amount" in op]
        if movers:
            rng.choice(movers)["amount"] = rng.choice([0, -1, 1e-300, 1e12, 2])
    elif kind == "huge_time" and ops:
        rng.choice(ops)["end"] = rng.choice([1e12, 1e17, 1e19, 1e308])
    elif kind == "odd_name":
        data["problem"]["name"] = rng.choice(ODD_TEXT)
        data["method"]["name"] = rng.choice(ODD_TEXT)
    elif kind == "no_offload":
        data["problem"].pop("offload", None)
    elif kind == "problem":
        return "problem:" + change_problem(rng, data["problem"])
    return kind


def _safely(change, rng: random.Random, data: dict) -> str:
    """``change(rng, data)``; a change that no longer fits the data (an earlier one broke its shape) is skipped."""
    try:
        return change(rng, data)
    except (TypeError, KeyError, AttributeError, IndexError, ValueError):
        return "skipped"


def text_damage(rng: random.Random, text: str) -> str:
    """Sometimes cut the text or replace a character."""
    roll = rng.random()
    if roll < 0.05:
        return text[:rng.randrange(len(text) + 1)]
    if roll < 0.1 and text:
        at = rng.randrange(len(text))
        return text[:at] + rng.choice('{}[]",:0e-. x') + text[at + 1:]
    return text


# ---------------------------------------------------------------------------------------- runs

class Campaign:
    def __init__(self, folder: Path, seed: int, list_failures: bool, verbose: bool = False):
        self.folder, self.rng, self.list_failures = folder, random.Random(seed), list_failures
        self.verbose = verbose
        self.outcomes: dict[str, Counter] = defaultdict(Counter)
        self.failures: list[str] = []
        self.wrong = 0  # failures that are wrong answers about a witness problem (see fuzz_witness)
        self.schedules: list[Path] = []  # written and checked by earlier runs
        self.peak_rss = 0
        self.runs = 0
        self.count = 0

    def path(self, name: str) -> Path:
        self.count += 1
        return self.folder / f"{self.count}-{name}"

    def write(self, data, name: str = "in.json", damage: bool = True) -> Path:
        path = self.path(name)
        text = json.dumps(data)
        path.write_text(text_damage(self.rng, text) if damage else text, errors="surrogatepass")
        return path

    def run(self, argv: list[str], limit: float = 0.0, writes: str | None = None, what: str = "",
            judge=None, label: str | None = None) -> None:
        """Fork a child that runs ``main(argv)`` (then ``check`` on ``writes`` when it was written);
        ``judge(code, stdout)``, when given, says what is wrong with the answer (None: nothing)."""
        command = argv[0]
        report = self.path("report.json")
        out_path, err_path = self.path("out.txt"), self.path("err.txt")
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the campaign's loop
            try:
                _child(argv, writes, report, out_path, err_path)
            except BaseException:  # noqa: BLE001 - the harness itself failed: say so in the report
                Path(str(report) + ".harness").write_text(traceback.format_exc())
            finally:
                os._exit(0)
        deadline = started + limit + GRACE
        status, usage, killed = 0, None, False
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                _, status, usage = os.wait4(pid, 0)
                killed = True
                break
            time.sleep(0.02)
        elapsed = time.monotonic() - started
        self.runs += 1
        rss = usage.ru_maxrss * 1024 if usage else 0
        self.peak_rss = max(self.peak_rss, rss)
        result = json.loads(report.read_text()) if report.exists() else {}
        harness = Path(str(report) + ".harness")
        if harness.exists():
            print("harness error:", harness.read_text()[-800:], file=sys.stderr)
        err = err_path.read_text(errors="replace") if err_path.exists() else ""
        outcome = self.outcomes[label or command]
        problems = []
        if killed:
            problems.append(f"over its time limit + {GRACE:g} s ({elapsed:.0f} s)")
        if rss > MEMORY_LIMIT or result.get("memory_error"):
            problems.append(f"memory: peak RSS {rss / 2 ** 30:.1f} GiB")
        if result.get("traceback"):
            problems.append("traceback: " + result["traceback"].strip().splitlines()[-1][:200])
        code = result.get("code")
        if code is None and not killed:
            problems.append(f"no result (wait status {status})")
        elif code not in (None, 0, 1, 2, 3, 4, 130):
            problems.append(f"exit {code}")
        if code in (2, 3, 4) and not _one_error_line(err, command):
            problems.append("error not one line: " + repr(err[-300:]))
        if result.get("check") not in (None, 0):
            problems.append(f"check refused the schedule it wrote (exit {result['check']}): "
                            + result.get("check_err", "")[:200])
        if code == 1 and command not in ("check", "run", "export"):  # export refuses an invalid schedule as check does
            problems.append("exit 1 (internal error): " + err.strip()[-200:])
        if judge is not None and not problems:
            out = out_path.read_text(errors="replace") if out_path.exists() else ""
            wrong = judge(code, out)
            if wrong:
                self.wrong += 1
                problems.append(f"wrong answer: {wrong}; exit {code}; " + (err.strip() or out.strip())[-300:])
        if problems:
            outcome["FAIL"] += 1
            line = f"{label or command} {what}: {'; '.join(problems)} | argv: {_short(argv)}"
            self.failures.append(line)
            if self.list_failures:
                print("FAIL", line, file=sys.stderr, flush=True)
        else:
            outcome[f"exit {code}"] += 1
            if writes and code == 0 and Path(writes).exists() and result.get("check") == 0:
                self.schedules.append(Path(writes))
        outcome["seconds"] += elapsed
        if self.verbose:
            print(f"{command} exit {code} {elapsed:.1f}s {what} | {err.strip()[-150:]!r}", file=sys.stderr)

    # one case per command -----------------------------------------------------------------------

    def problem_input(self) -> tuple[Path, str]:
        rng = self.rng
        data = random_problem(rng) if rng.random() < 0.6 else json.loads((ROOT / rng.choice(INSTANCES)).read_text())
        changes = [_safely(change_problem, rng, data) for _ in range(rng.choice([0, 0, 0, 1, 1, 2, 3]))]
        return self.write(data), "+".join(changes) or "as generated"

    def schedule_input(self) -> tuple[Path, str]:
        if not self.schedules or self.rng.random() < 0.05:
            return self.write(json.loads((ROOT / "docs/example/example-cpsat.json").read_text())), "example"
        data = json.loads(self.rng.choice(self.schedules[-200:]).read_text())
        what = _safely(change_schedule, self.rng, data)
        return self.write(data), what

    def output(self, suffix: str) -> str:
        roll = self.rng.random()
        if roll < 0.03:
            return str(self.folder / "missing" / f"x.{suffix}")
        if roll < 0.06:
            return str(self.folder / f"new\nline{self.count}.{suffix}")
        return str(self.path(f"out.{suffix}"))

    def case(self) -> None:
        rng = self.rng
        command = rng.choices(["bound", "baseline", "solve", "check", "plot", "export", "schema", "problem",
                               "frontier", "bench", "profile", "run", "usage", "witness"],
                              weights=[14, 22, 11, 14, 6, 7, 2, 8, 1, 1, 0.5, 0.5, 2, 25])[0]
        if command == "witness":
            self.witness_case()
        elif command == "bound":
            path, what = self.problem_input()
            self.run(["bound", str(path)] + rng.choice([[], ["--json"], ["--split", "1", "--threads", "1"]]),
                     limit=1.0, what=what)
        elif command == "baseline":
            path, what = self.problem_input()
            out = self.output("json")
            extra = ["--ignore-capacity"] if rng.random() < 0.15 else []
            self.run(["baseline", str(path), "-m", rng.choice(METHODS), "-o", out, *extra]
                     + (["--json"] if rng.random() < 0.2 else []), writes=out, what=what)
        elif command == "solve":
            path, what = self.problem_input()
            out, limit = self.output("json"), rng.choice([1, 1, 2, 3])
            argv = ["solve", str(path), "-o", out, "--time-limit", str(limit), "--quiet"]
            roll = rng.random()
            if roll < 0.15:
                argv += ["--objective", "memory", "--makespan-limit",
                         rng.choice(["1.02x", "1x", "-5", "1e308x", "0", "nan", "1e18", "abc", "500"])]
            elif roll < 0.25:
                argv += ["--threads", rng.choice(["1", "1", "0", "-1", "1000000000"])]
            elif roll < 0.3:
                argv += ["--solver", "milp"]
            elif roll < 0.35:
                argv[5] = rng.choice(["0", "-1", "nan", "inf", "1e308", "0.01"])
                limit = 1
            elif roll < 0.4 and self.schedules:
                argv += ["--warm-start", str(rng.choice(self.schedules))]
            if rng.random() < 0.2:
                argv.append("--json")
            self.run(argv, limit=float(limit), writes=out, what=what)
        elif command == "check":
            path, what = self.schedule_input()
            self.run(["check", str(path)] + (["--json"] if rng.random() < 0.3 else []), what=what)
        elif command == "plot":
            path, what = self.schedule_input()
            suffix = rng.choice(["png", "png", "svg", "pdf", "txt"])
            argv = ["plot", str(path), "-o", self.output(suffix)]
            if rng.random() < 0.2:
                argv += ["--size", rng.choice(["12x8", "0x0", "1e308x2", "nan", "300x300", "3x3"])]
            self.run(argv, what=what)
        elif command == "export":
            path, what = self.schedule_input()
            to = rng.choice(["chrome-trace", "chrome-trace", "torch", "csv"])
            argv = ["export", str(path), "--to", to, "-o", self.output("json")]
            if rng.random() < 0.4:
                argv += ["--unit-us", rng.choice(["1e308", "1000", "0", "-1", "nan", "inf", "1e-300", "1"])]
            self.run(argv, what=what)
        elif command == "schema":
            self.run(["schema", rng.choice(["problem", "schedule", "transformer", "hardware", "gpus", "bogus"])])
        elif command == "problem":
            self.problem_command()
        elif command == "frontier":
            path, what = self.problem_input()
            limit = 1
            argv = ["frontier", str(path), "--time-limit", str(limit), "--points", rng.choice(["2", "3", "0", "-1"]),
                    "--threads", "1", "-o", self.output("png")]
            self.run(argv + rng.choice([[], ["--no-baselines"], ["--no-compare"]]), limit=8.0 * limit, what=what)
        elif command == "bench":
            path, what = self.problem_input()
            out = str(self.path("bench"))
            self.run(["bench", str(path), "--methods", rng.choice(["1f1b,zb-h1", "greedy,cpsat", "all", "nope"]),
                      "--time-limit", "1", "--threads", "1", "--out", out, "--quiet", "--no-plots"],
                     limit=30.0, what=what)
        elif command == "profile":
            model = rng.choice(MODELS)
            self.run(["profile", "--model", model, "--devices", rng.choice(["2", "0", "100000"]),
                      "--microbatches", rng.choice(["2", "-1"]), "-o", self.output("json")], limit=30.0)
        elif command == "run":
            path, what = self.schedule_input()
            self.run(["run", str(path), "--model", rng.choice(["models/mlp-tiny.json", "models/nope.json"]),
                      "--steps", "1", "--device", "cpu", "--timeout", "20"], limit=30.0, what=what)
        else:  # odd command lines
            self.run(rng.choice([["solve", "--time-limt", "3"], ["bnd"], ["bound"], ["plot"], ["--version"],
                                 ["check", "a\nb.json"], ["bound", "/dev/null"], ["bound", str(self.folder)]]))

    def witness_case(self) -> None:
        """A valid odd problem and its witness schedule (``fuzz_witness``): no command may call the problem
        infeasible, prove an optimum or a bound above the witness's makespan, or refuse the witness."""
        rng = self.rng
        schedule = witness(rng, odd_problem(rng), rng.choice([0, 0, 0.5]))
        span = schedule["metrics"]["makespan"]
        tol = 1e-6 * max(1.0, span)
        problem_path = self.write(schedule["problem"], "odd.json", damage=False)
        witness_path = self.write(schedule, "witness.json", damage=False)
        what = "witness " + json.dumps({k: v for k, v in schedule["problem"].items() if k not in ("format", "name")})
        command = rng.choices(["check", "solve", "bound", "baseline", "export", "plot", "run"],
                              weights=[20, 20, 20, 15, 15, 5, 5])[0]
        label = f"{command}*"

        def valid(code: int | None, out: str) -> str | None:
            if code != 0:
                return f"{command} refuses a valid schedule"
            if command == "check" and "warning:" in out:
                return "check disagrees with the witness's metrics (computed by the contract)"
            return None

        def feasible(code: int | None, out: str) -> str | None:
            if code == 3:
                return f"{command} calls a problem infeasible that the witness schedules"
            if command == "bound" and code == 0:
                try:
                    bound = json.loads(out)["makespan_lower_bound"]
                except (ValueError, KeyError, TypeError):
                    return "bound --json printed no makespan_lower_bound"
                if bound > span + tol:
                    return f"lower bound {bound:g} above the witness's makespan {span:g}"
            if command == "solve" and code == 0 and Path(out_file).exists():
                written = json.loads(Path(out_file).read_text())
                method, written = written["method"], written["metrics"]["makespan"]
                if (method.get("lower_bound") or 0) > span + tol:
                    return f"lower bound {method['lower_bound']:g} above the witness's makespan {span:g}"
                if method["status"] == "optimal" and written > span + tol:
                    return f"'optimal' {written:g} above the witness's makespan {span:g}"
                if "--warm-start" in argv and written > span + tol:
                    return f"{written:g} from the witness ({span:g}) as its warm start"
            return None

        out_file, argv = str(self.path("out.json")), []
        if command == "check":
            self.run(["check", str(witness_path)], what=what, judge=valid, label=label)
        elif command == "solve":
            argv = ["solve", str(problem_path), "-o", out_file, "--time-limit", "2", "--quiet"]
            argv += rng.choice([[], [], ["--solver", "milp"], ["--threads", "1"], ["--warm-start", str(witness_path)]])
            self.run(argv, limit=2.0, writes=out_file, what=what, judge=feasible, label=label)
        elif command == "bound":
            self.run(["bound", str(problem_path), "--json"], limit=1.0, what=what, judge=feasible, label=label)
        elif command == "baseline":
            self.run(["baseline", str(problem_path), "-m", rng.choice(METHODS[:-1]), "-o", out_file],
                     writes=out_file, what=what, label=label)
        elif command == "export":
            self.run(["export", str(witness_path), "--to", rng.choice(["torch", "chrome-trace"]),
                      "-o", out_file], what=what, judge=valid, label=label)
        elif command == "plot":
            self.run(["plot", str(witness_path), "-o", str(self.path("gantt.png"))], what=what, judge=valid,
                     label=label)
        else:  # both runtimes, with the gradient check, on a toy MLP of one layer per stage
            stages = schedule["problem"]["devices"] * schedule["problem"]["chunks"]
            model = {"format": "ppsolve/model@1", "name": "mlp-witness", "kind": "mlp", "width": 8,
                     "layers": stages, "micro_batch_size": 2, "seed": 0}
            self.run(["run", str(witness_path), "--model", str(self.write(model, "mlp.json", damage=False)),
                      "--steps", "1", "--device", "cpu", "--check", "--runtime", rng.choice(["ppsolve", "torch"]),
                      "--timeout", "60"], limit=60.0, what=what, judge=valid, label=label)

    def problem_command(self) -> None:
        rng = self.rng
        model = json.loads((ROOT / rng.choice(MODELS)).read_text())
        valid = rng.random() < 0.6  # else odd numbers, fields and options
        if not valid and rng.random() < 0.5:
            numbers = [p for p in _numbers(model) if p]
            if numbers:
                _set(model, rng.choice(numbers), rng.choice(TINY + HUGE + [0, -1, math.nan]))
        if not valid and rng.random() < 0.2:
            model[rng.choice(["na\nme", "$", "hidden_"])] = 1
        model_path = self.write(model, "model.json")
        argv = ["problem", str(model_path), "--devices", rng.choice(["2", "4", "4", "3", "8"] + ([] if valid else
                                                                                                 ["0", "100000"])),
                "--microbatches", rng.choice(["4", "8", "8", "16", "1"] + ([] if valid else ["-1", "10000000"])),
                "-o", self.output("json") if not valid else str(self.path("out.json"))]
        if rng.random() < 0.5:
            hardware = {"gpu": rng.choice(["H100", "A100", "H200"] + ([] if valid else ["nope"]))}
            for field in rng.sample(["host_link_gbps", "tflops", "hbm_gib", "nvlink_gbps", "p2p_latency_ms"],
                                    rng.randint(0, 2)):
                hardware[field] = rng.choice([1, 10, 100] if valid else TINY + HUGE + [1, 0, -1])
            argv += ["--hardware", str(self.write(hardware, "hw.json"))]
        else:
            argv += ["--gpu", rng.choice(["H100", "A100", "h200", "GH200"] + ([] if valid else ["nope"]))]
        argv += rng.choice([[], ["--offload"], ["--recompute", "decide"],
                            ["--capacity", rng.choice(["none", "40"] if valid else ["0.001", "1e308", "-1"])],
                            ["--chunks", "2", "--placement", "vshape"],
                            ["--partition", "auto", "--top", "2", "--time-limit", "1"]])
        limit = 2.0 if "auto" in argv else 0.0  # --top partitions x --time-limit
        self.run(argv, limit=limit, writes=argv[argv.index("-o") + 1] if valid else None)


def _child(argv: list[str], writes: str | None, report: Path, out_path: Path, err_path: Path) -> None:
    """In the forked child: run ``main(argv)`` with its output in files; report what happened."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    os.setpgrp()
    out = open(out_path, "w", errors="backslashreplace")
    err = open(err_path, "w", errors="backslashreplace")
    sys.stdout, sys.stderr = out, err
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    result: dict = {}
    try:
        result["code"] = main(argv)
    except SystemExit as exc:  # argparse
        result["code"] = exc.code if isinstance(exc.code, int) else 2
    except MemoryError:
        result["memory_error"] = True
    except BaseException:  # noqa: BLE001 - the campaign counts what escapes main
        result["traceback"] = traceback.format_exc()
    if result.get("code") == 0 and writes and Path(writes).exists():
        buffer = io.StringIO()
        sys.stderr = buffer
        try:
            if argv[0] == "problem":  # a problem file: bound reads it (3: the cap is too small for it)
                result["check"] = 0 if main(["bound", writes]) in (0, 3) else 1
            else:
                result["check"] = main(["check", writes])
            if result["check"] == 1 and "--ignore-capacity" in argv:  # asked for: only the cap may break
                from ppsolve.checker import check
                from ppsolve.schedule import load_schedule

                found = check(load_schedule(writes))
                result["check"] = int(any(v.rule != "memory" and not (v.rule == "retime" and "capacity" in v.message)
                                          for v in found.violations))
        except BaseException:  # noqa: BLE001
            result["check"] = "traceback"
        result["check_err"] = buffer.getvalue()
    out.flush()
    err.flush()
    report.write_text(json.dumps(result))


def _one_error_line(err: str, command: str) -> bool:
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ppsolve") and "error" in line or "usage:" in line]
    if any(line.startswith("usage:") for line in lines):
        return True  # argparse: the usage and one error line
    return len(errors) == 1 and "Traceback" not in err and lines[-1] == errors[0] \
        or command in ("bench", "frontier", "run", "profile") and "Traceback" not in err


def _short(argv: list[str]) -> str:
    return " ".join(repr(a) if any(c in a for c in " \n\r") else a for a in argv)[:300]


def main_campaign() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--until", type=float, default=None, help="stop starting runs after this many seconds")
    parser.add_argument("--list-failures", action="store_true", help="print each failure as it happens")
    parser.add_argument("--verbose", action="store_true", help="print every run's outcome")
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_AS, (2 * MEMORY_LIMIT, 2 * MEMORY_LIMIT))  # the generator itself
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ppsolve-fuzz-") as folder:
        campaign = Campaign(Path(folder), args.seed, args.list_failures, args.verbose)
        while campaign.runs < args.runs and (args.until is None or time.monotonic() - began < args.until):
            campaign.case()
            if campaign.runs % 100 == 0:
                print(f"{campaign.runs} runs, {time.monotonic() - began:.0f} s, {len(campaign.failures)} failures",
                      file=sys.stderr, flush=True)
            if len(campaign.schedules) > 400:
                campaign.schedules = campaign.schedules[-200:]
        shutil.rmtree(folder, ignore_errors=True)
    total = Counter()
    print(f"{campaign.runs} runs (seed {args.seed}) in {time.monotonic() - began:.0f} s; "
          f"largest peak RSS of a run {campaign.peak_rss / 2 ** 20:.0f} MiB; COMMAND* runs are on witness problems")
    for command, outcome in sorted(campaign.outcomes.items()):
        counts = {k: v for k, v in sorted(outcome.items()) if k != "seconds"}
        runs = sum(counts.values())
        total.update(counts)
        print(f"  {command:9} {runs:5} runs, {outcome['seconds'] / max(1, runs):5.2f} s each: {counts}")
    print(f"failures: {len(campaign.failures)} (wrong answers about a witness: {campaign.wrong}; tracebacks: "
          f"{sum('traceback' in line for line in campaign.failures)})")
    for line in campaign.failures[:50]:
        print("  " + line)
    return 1 if campaign.failures else 0


if __name__ == "__main__":
    sys.exit(main_campaign())
