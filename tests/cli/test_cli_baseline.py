"""``ppsolve baseline``: list, build, check, and one-line refusals with the right exit codes."""

from __future__ import annotations

import json

import pytest

from ppsolve.checker import check
from ppsolve.cli import main
from ppsolve.methods import all_methods
from ppsolve.problem import load_problem
from ppsolve.schedule import load_schedule
from tests.helpers import problem_dict
from tests.helpers import ROOT

INSTANCES = sorted((ROOT / "instances").glob("*.json"))


def write_problem(tmp_path, **overrides) -> str:
    path = tmp_path / "problem.json"
    path.write_text(json.dumps(problem_dict(**overrides)))
    return str(path)


def test_list_names_every_baseline_with_requirements(capsys):
    assert main(["baseline", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    methods = all_methods("baseline")
    assert [line.split()[0] for line in lines] == [m.name for m in methods]
    for line, method in zip(lines, methods):
        assert method.requirements in line and method.description in line


def test_builds_writes_and_summarises(tmp_path, capsys):
    problem = write_problem(tmp_path, devices=4, microbatches=8)
    out = tmp_path / "zb.json"
    assert main(["baseline", problem, "--method", "zb-h1", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    schedule = load_schedule(out)
    assert check(schedule).ok and schedule.method.name == "zb-h1"
    assert "makespan 27" in text and "bound 27" in text and "peak memory [4, 3, 2, 1]" in text


def test_json_summary(tmp_path, capsys):
    problem = write_problem(tmp_path, devices=2, microbatches=4, chunks=2, placement="vshape")
    out = tmp_path / "v.json"
    assert main(["baseline", problem, "--method", "greedy", "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["method"] == "greedy" and summary["valid"] and summary["executable"]
    assert summary["makespan"] == load_schedule(out).makespan


def test_not_applicable_is_one_line_exit_2(tmp_path, capsys):
    problem = write_problem(tmp_path, devices=4, microbatches=8, backward="fused")
    out = tmp_path / "x.json"
    assert main(["baseline", problem, "--method", "zb-h1", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "zb-h1 does not apply" in err and "split" in err
    assert not out.exists()
    split = write_problem(tmp_path, devices=4, microbatches=8)
    assert main(["baseline", split, "--method", "po-f", "-o", str(out)]) == 2
    assert "needs an offload link" in capsys.readouterr().err


def test_capacity_refusal_exit_3_and_ignore_capacity(tmp_path, capsys):
    # zb-h2 keeps 2d-1 = 7 activations on device 0; the cap is 5
    problem = write_problem(tmp_path, devices=4, microbatches=8, memory_capacity=5)
    out = tmp_path / "h2.json"
    assert main(["baseline", problem, "--method", "zb-h2", "-o", str(out)]) == 3
    err = capsys.readouterr().err.strip()
    assert "zb-h2 needs 7.0 on device 0, capacity is 5.0" in err and "\n" not in err
    assert not out.exists()
    assert main(["baseline", problem, "--method", "zb-h2", "-o", str(out), "--ignore-capacity"]) == 0
    text = capsys.readouterr().out
    assert "warning: this schedule breaks the memory cap on device(s) 0 " in text
    schedule = load_schedule(out)
    assert schedule.method.extra["capacity_broken"] is True
    report = check(schedule)
    assert not report.ok and all(v.rule in ("memory", "retime") for v in report.violations)


def test_usage_errors(tmp_path, capsys):
    assert main(["baseline"]) == 2
    assert "required" in capsys.readouterr().err
    problem = write_problem(tmp_path)
    assert main(["baseline", problem, "--method", "nope", "-o", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'nope'" in err and "zb-h1" in err


@pytest.mark.parametrize("path", INSTANCES, ids=lambda p: p.stem)
def test_every_applicable_baseline_on_the_bundled_instances(path, tmp_path):
    problem = load_problem(path)
    for method in all_methods("baseline"):
        if method.why_not(problem) is not None:
            continue
        out = tmp_path / f"{method.name}.json"
        code = main(["baseline", str(path), "--method", method.name, "-o", str(out)])
        assert code in (0, 3), (method.name, code)
        if code == 0:
            assert check(load_schedule(out)).ok


def test_unwritable_output_is_one_line(tmp_path, capsys):
    problem = write_problem(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["baseline", problem, "--method", "1f1b", "-o", str(blocker / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ppsolve baseline: error: {blocker / 'x.json'}: cannot write") and err.count("\n") == 1
