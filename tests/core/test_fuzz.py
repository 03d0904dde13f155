"""Fuzzing with damaged copies of the bundled files: every command answers with an exit code 0-4 and at
most one error line, never a traceback, in bounded time and memory (see tests/core/mutations.py)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ppsolve.cli import main
from ppsolve.errors import PpsolveError
from ppsolve.problem import load_problem
from ppsolve.schedule import load_schedule
from tests.core.mutations import PROBLEM_FILES, ROOT, SCHEDULE_FILES, damaged_text, load, problem_change

FUZZ = settings(derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
PROBLEMS = st.sampled_from(PROBLEM_FILES).flatmap(lambda f: damaged_text(load(f)))
SCHEDULES = st.sampled_from(SCHEDULE_FILES).flatmap(lambda f: damaged_text(load(f)))
SECONDS = 20.0  # a command on a damaged file of this size answers well within this
SOLVE_SECONDS = 60.0  # solve: --time-limit 1, then the warm start, model building and the summary (2-core CI)


def _write(text: str, folder: str) -> Path:
    path = Path(folder) / "in.json"
    path.write_text(text)
    return path


def _answers(argv: list[str], capsys, seconds: float = SECONDS) -> None:
    """Run one command in-process: exit 0-4, at most one line on stderr, within ``seconds``."""
    started = time.perf_counter()
    code = main(argv)
    elapsed = time.perf_counter() - started
    err = capsys.readouterr().err
    assert code in (0, 1, 2, 3, 4), (argv, code, err)
    assert err.count("\n") <= 1 and "Traceback" not in err, err
    assert elapsed < seconds, (argv, elapsed)


@settings(FUZZ, max_examples=250)
@given(text=PROBLEMS)
def test_loading_a_damaged_problem_is_valid_or_one_input_error(text):
    with tempfile.TemporaryDirectory() as folder:
        try:
            load_problem(_write(text, folder))
        except PpsolveError as error:
            assert "\n" not in str(error)


@settings(FUZZ, max_examples=150)
@given(text=SCHEDULES)
def test_loading_a_damaged_schedule_is_valid_or_one_input_error(text):
    with tempfile.TemporaryDirectory() as folder:
        try:
            load_schedule(_write(text, folder))
        except PpsolveError as error:
            assert "\n" not in str(error)


@settings(FUZZ, max_examples=80)
@given(text=PROBLEMS, method=st.sampled_from(["1f1b", "zb-h1", "gpipe", "greedy", "interleaved-1f1b", "po-f"]))
def test_bound_and_baseline_answer_a_damaged_problem(capsys, text, method):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(text, folder)
        _answers(["bound", str(path)], capsys)
        _answers(["baseline", str(path), "--method", method, "-o", f"{folder}/s.json"], capsys)


CHANGED = st.sampled_from(PROBLEM_FILES).flatmap(lambda f: problem_change(load(f))).map(json.dumps)


@settings(FUZZ, max_examples=40)
@given(text=CHANGED, method=st.sampled_from(["1f1b", "zb-h1", "greedy", "po-h", "interleaved-1f1b", "gpipe"]))
def test_a_changed_problem_gets_one_error_or_a_schedule_that_passes_check(capsys, text, method):
    """Tiny and huge numbers together, odd names, empty devices, all-zero times, a capacity below one
    activation: whatever ``baseline`` writes, ``check`` accepts."""
    with tempfile.TemporaryDirectory() as folder:
        path, out = _write(text, folder), f"{folder}/s.json"
        _answers(["bound", str(path)], capsys)
        code = main(["baseline", str(path), "--method", method, "-o", out])
        err = capsys.readouterr().err
        assert code in (0, 2, 3) and err.count("\n") <= 1 and "Traceback" not in err, (code, err)
        if code == 0:
            assert main(["check", out]) == 0, capsys.readouterr()
            _answers(["plot", out, "-o", f"{folder}/g.png"], capsys)


@pytest.fixture(scope="module")
def big_schedule() -> dict:
    """A 1F1B schedule of 4 devices x 256 microbatches (3072 ops), as a file's content."""
    from ppsolve.methods import run_method
    from ppsolve.problem import problem_from_dict

    data = {**load(PROBLEM_FILES[0]), "microbatches": 256}
    data.pop("offload")
    data["memory"]["capacity"] = None
    return run_method("1f1b", problem_from_dict(data)).to_dict()


@settings(FUZZ, max_examples=6, phases=[Phase.generate])
@given(start=st.floats(0, 1), share=st.floats(0.01, 1))
def test_check_answers_a_big_schedule_with_many_duplicated_ops(capsys, big_schedule, start, share):
    ops = big_schedule["ops"]
    first = int(start * (len(ops) - 1))
    text = json.dumps({**big_schedule, "ops": ops + ops[first:first + max(1, int(share * len(ops)))]})
    with tempfile.TemporaryDirectory() as folder:
        path = _write(text, folder)
        assert main(["check", str(path)]) == 1  # duplicates: invalid, said in its report (exit 1)
        capsys.readouterr()


@settings(FUZZ, max_examples=10, phases=[Phase.generate])  # no shrinking: a slow solve would shrink for long
@given(text=damaged_text(load(PROBLEM_FILES[0])))
def test_solve_answers_a_damaged_problem(capsys, text):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(text, folder)
        _answers(["solve", str(path), "-o", f"{folder}/s.json", "--time-limit", "1", "--quiet"], capsys,
                 SOLVE_SECONDS)


@settings(FUZZ, max_examples=60)
@given(text=SCHEDULES)
def test_check_and_export_answer_a_damaged_schedule(capsys, text):
    with tempfile.TemporaryDirectory() as folder:
        path = _write(text, folder)
        _answers(["check", str(path)], capsys)
        _answers(["export", str(path), "--to", "chrome-trace", "-o", f"{folder}/t.json"], capsys)


def _limit_memory() -> None:
    limit = 3 * 1024 ** 3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _problem(**changes) -> str:
    data = load("instances/example.json")
    for key, value in changes.items():
        if key.startswith("time_"):
            data["time"][key[5:]] = value
        else:
            data[key] = value
    return json.dumps(data)


# The inputs of the issue that once hung, ate gigabytes or crashed, and a few more for the subprocess path.
SUBPROCESS_CASES = [
    ("bound", _problem(devices=100000)),
    ("baseline", _problem(microbatches=1000000000)),
    ("solve", _problem(time_forward=1e308)),
    ("solve", _problem(time_forward=1234567).replace("1234567", "9" * 5000)),
    ("bound", "[" * 50000),
    ("check", json.dumps({**load(SCHEDULE_FILES[0]), "problem": {
        k: v for k, v in load(SCHEDULE_FILES[0])["problem"].items() if k != "offload"}})),
    ("plot", json.dumps({**load(SCHEDULE_FILES[0]), "ops": load(SCHEDULE_FILES[0])["ops"][:-3]})),
]


@pytest.mark.parametrize("command,text", SUBPROCESS_CASES, ids=[f"{c}-{i}" for i, (c, _) in
                                                                 enumerate(SUBPROCESS_CASES)])
def test_a_subprocess_answers_with_one_line_in_bounded_time_and_memory(tmp_path, command, text):
    path = tmp_path / "in.json"
    path.write_text(text)
    argv = [sys.executable, "-m", "ppsolve", command, str(path)]
    if command in ("baseline", "solve"):
        argv += ["-o", str(tmp_path / "s.json")]
    if command == "baseline":
        argv += ["--method", "1f1b"]
    if command == "solve":
        argv += ["--time-limit", "2", "--quiet"]
    if command == "plot":
        argv += ["-o", str(tmp_path / "g.png")]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, preexec_fn=_limit_memory, cwd=ROOT)
    assert time.perf_counter() - started < 30
    assert done.returncode in (0, 1, 2, 3, 4), done.stderr
    assert done.stderr.count("\n") <= 1 and "Traceback" not in done.stderr, done.stderr
