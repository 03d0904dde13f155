"""ppsolve bench: a matrix of test-only methods on tiny problems, end to end."""

from __future__ import annotations

import csv
import json
import struct

import pytest

from tests.plot.helpers import ONE_F_ONE_B, SERIAL, register_for_test, tiny_problem  # noqa: E402

from ppsolve.commands.bench import select_methods
from ppsolve.studies.bench import SKIPPED, collect_problems, markdown_table, read_csv, run_bench
from ppsolve.cli import main
from ppsolve.methods import Method, RunOptions
from ppsolve.schedule import make_schedule


def _broken(problem, options):
    """A method whose schedule breaks the rules: every op at time 0."""
    from ppsolve.schedule import ScheduledOp

    ops = [ScheduledOp(op.kind, op.stage, op.microbatch, problem.placement[op.stage], 0.0,
                       problem.duration(op.kind, op.stage)) for op in problem.compute_ops()]
    return make_schedule(problem, ops, "broken-test")


BROKEN = Method("broken-test", "baseline", "test: invalid schedule", "any", lambda p: None, _broken)


def _crashes(problem, options):
    raise RuntimeError("boom")


CRASH = Method("crash-test", "baseline", "test: raises", "any", lambda p: None, _crashes)


@pytest.fixture
def problem_dir(tmp_path):
    root = tmp_path / "instances"
    (root / "suite").mkdir(parents=True)
    (root / "a.json").write_text(json.dumps(tiny_problem(2, 3, name="a").to_dict()))
    (root / "suite" / "b.json").write_text(json.dumps(
        tiny_problem(2, 2, chunks=2, placement="interleaved", backward="fused", name="b").to_dict()))
    return root


def test_directories_are_searched_recursively(problem_dir):
    found = collect_problems([problem_dir])
    assert [p.label for p in found] == ["a", "suite/b"]


def test_bench_end_to_end(problem_dir, tmp_path, monkeypatch, capsys):
    register_for_test(monkeypatch, SERIAL, ONE_F_ONE_B)
    out = tmp_path / "out"
    code = main(["bench", str(problem_dir), "--methods", "serial,1f1b-test", "--time-limit", "1",
                 "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "2 problem(s) x 2 method(s): 3 valid, 1 skipped" in printed
    with open(out / "results.csv", newline="") as handle:
        records = list(csv.DictReader(handle))
    assert {"problem", "method", "status", "makespan", "lower_bound", "makespan/bound", "bubble_ratio",
            "max_peak_memory", "offloaded", "seconds", "valid"} <= set(records[0])
    by_key = {(r["problem"], r["method"]): r for r in records}
    assert by_key[("suite/b", "1f1b-test")]["status"] == SKIPPED
    assert "linear" in by_key[("suite/b", "1f1b-test")]["note"]
    for key in [("a", "serial"), ("a", "1f1b-test"), ("suite/b", "serial")]:
        row = by_key[key]
        assert row["valid"] == "yes"
        assert float(row["makespan"]) >= float(row["lower_bound"]) > 0
        assert float(row["makespan/bound"]) == pytest.approx(float(row["makespan"]) / float(row["lower_bound"]),
                                                            rel=1e-5)
    # 1F1B overlaps microbatches, serial does not: faster, more memory
    assert float(by_key[("a", "1f1b-test")]["makespan"]) < float(by_key[("a", "serial")]["makespan"])
    assert float(by_key[("a", "1f1b-test")]["max_peak_memory"]) > float(by_key[("a", "serial")]["max_peak_memory"])
    md = (out / "results.md").read_text()
    assert "| a | serial |" in md and "| suite/b | 1f1b-test | skipped |" in md
    for name in ("ratio.png", "memory_vs_makespan.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", data[16:24])[0] > 300
    assert [r.method for r in read_csv(out / "results.csv")] == [r["method"] for r in records]


def test_invalid_and_crashing_methods_are_reported_not_fatal(problem_dir, tmp_path, monkeypatch):
    register_for_test(monkeypatch, SERIAL, BROKEN, CRASH)
    problems = collect_problems([problem_dir / "a.json"])
    methods = select_methods("serial,broken-test,crash-test")
    rows = run_bench(problems, methods, RunOptions(time_limit=1))
    status = {r.method: r for r in rows}
    assert status["serial"].valid is True
    assert status["broken-test"].valid is False and "checker" in status["broken-test"].note
    assert status["crash-test"].status == "error" and "boom" in status["crash-test"].note
    assert "**NO**" in markdown_table(rows)
    out = tmp_path / "o"
    assert main(["bench", str(problem_dir / "a.json"), "--methods", "serial,broken-test", "--out", str(out),
                 "--quiet", "--no-plots"]) == 1


def test_unknown_method_is_one_clear_error(problem_dir, tmp_path, capsys):
    assert main(["bench", str(problem_dir), "--methods", "no-such-method", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--methods" in err and "no-such-method" in err and "Traceback" not in err


def test_missing_path_is_one_clear_error(tmp_path, capsys):
    assert main(["bench", str(tmp_path / "nope"), "--methods", "all", "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_benchmarks_md_is_generated_from_results(problem_dir, tmp_path, monkeypatch):
    from benchmarks.reports import write_benchmarks_md

    register_for_test(monkeypatch, SERIAL, ONE_F_ONE_B)
    out = tmp_path / "docs" / "bench"
    assert main(["bench", str(problem_dir), "--methods", "serial,1f1b-test", "--out", str(out), "--quiet"]) == 0
    target = tmp_path / "BENCHMARKS.md"
    assert write_benchmarks_md.main(["--results", str(out / "results.csv"), "--instances", str(problem_dir),
                                     "--out", str(target)]) == 0
    text = target.read_text()
    assert "-m ppsolve bench instances/*.json instances/suite --methods all" in text and "-m ppsolve frontier" in text  # regenerate.sh
    assert "| serial | baseline | 2 |" in text  # summary: serial valid on both problems
    assert "![makespan over bound per method and problem](docs/bench/ratio.png)" in text
    runs = out / "tables" / "all-runs.md"  # a short table stays in BENCHMARKS.md, a long one moves
    assert ("| suite/b | 1f1b-test | skipped |" in text) != runs.exists()
    assert "| suite/b | 1f1b-test | skipped |" in (runs.read_text() if runs.exists() else text)
    assert "| suite/b | 2 | 2 | 2 | interleaved | fused |" in text
