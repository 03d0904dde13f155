"""The realistic-gaps report: one row per problem, the gap from the solve's own makespan and bound."""

from __future__ import annotations

import json

from benchmarks.reports import realistic_gaps
from tests.helpers import ROOT


def test_one_problem_row_and_summary(tmp_path):
    out = tmp_path / "gaps.json"
    section = tmp_path / "gaps.md"
    assert realistic_gaps.main(["--time-limit", "3", "--threads", "1", "--json", str(out), "--section", str(section),
                                str(ROOT / "instances" / "example.json")]) == 0
    (row,) = json.loads(out.read_text())
    assert row["problem"] == "example" and row["valid"]
    assert row["lower_bound"] <= row["makespan"]
    text = section.read_text()
    gap = 100 * (row["makespan"] - row["lower_bound"]) / row["makespan"]
    assert f"| example | - | - | {row['makespan']:.2f} | {row['lower_bound']:.2f} | {gap:.1f} % |" in text
    assert "Gap over 1 problems" in text


def test_render_reads_the_figures_back(tmp_path):
    rows = [realistic_gaps.Row("a", 10.0, 9.0, 8.0, 7.6, "feasible", 1.0, True),
            realistic_gaps.Row("b", None, None, 5.0, 5.0, "optimal", 1.0, True)]
    text = realistic_gaps.section(rows, "cmd")
    assert "median 2.5 %, largest 5.0 %" in text


def test_an_earlier_run_stands_beside_each_row(tmp_path):
    earlier = tmp_path / "old.json"
    earlier.write_text(json.dumps([{"problem": "example", "makespan": 999.5, "lower_bound": 111.25}]))
    out, section = tmp_path / "gaps.json", tmp_path / "gaps.md"
    assert realistic_gaps.main(["--time-limit", "3", "--threads", "1", "--json", str(out), "--section", str(section),
                                "--previous", str(earlier), "--previous-run", "a run of long ago",
                                str(ROOT / "instances" / "example.json")]) == 0
    (row,) = json.loads(out.read_text())
    assert (row["previous_makespan"], row["previous_bound"]) == (999.5, 111.25)
    text = section.read_text()
    assert "The columns *before* are a run of long ago." in text
    assert f"| example | - | - | 999.50 | 111.25 | {row['makespan']:.2f} | {row['lower_bound']:.2f} |" in text
    # read back from the JSON, the section is the same
    assert realistic_gaps.section([realistic_gaps.Row(**r) for r in json.loads(out.read_text())],
                                  "x", "a run of long ago").count("| 999.50 | 111.25 |") == 1


def test_a_bound_met_up_to_rounding_is_no_gap():
    row = realistic_gaps.Row("c", None, None, 3616.76, 3616.7600000000007, "optimal", 1.0, True)
    assert row.gap == 0.0 and "| 0.0 % |" in realistic_gaps.section([row], "cmd")
