"""The long-context study (``benchmarks.reports.long_context``) on 2 small batches with tiny time limits."""

from __future__ import annotations

import json

import pytest

from benchmarks.reports.long_context import PACKINGS, SPLIT, Setup, draw_documents, main, measure_batch
from ppsolve.costmodel.packing import pack_sequential

BUDGET = 8192
PARTITIONS = {"linear": (5, 5, 4, 4, 4, 4, 4, 2), "interleaved": (2,) * 15 + (2,)}  # no partition search


def test_the_partition_search_runs_when_no_partition_is_given():
    setup = Setup.make(BUDGET, 8, {"interleaved": PARTITIONS["interleaved"]})
    assert sum(setup.partitions["linear"]) == 32 and setup.partitions["interleaved"] == PARTITIONS["interleaved"]


def test_a_batch_fills_exactly_the_microbatches_asked_in_data_order():
    documents = draw_documents(BUDGET, 6, seed=3)
    assert documents == draw_documents(BUDGET, 6, seed=3)  # reproducible
    assert len(pack_sequential(documents, BUDGET)) == 6
    assert all(64 <= n <= BUDGET for n in documents)


def test_each_packing_keeps_the_documents_and_no_schedule_beats_the_bound():
    setup = Setup.make(BUDGET, 8, PARTITIONS)
    rows = measure_batch(setup, 0, plan_time=0.05, solve_time=0.5)
    assert [r.packing for r in rows] == list(PACKINGS)
    assert rows[0].documents == rows[1].documents == len(draw_documents(BUDGET, 8, 0))
    for r in rows:
        assert r.imbalance >= max(r.floor, 1.0) - 1e-9 and (r.floor >= 1.0 or r.packing == SPLIT)
        spans = [x for x in (*r.schedules.values(), r.plan, r.solve) if x is not None]
        assert min(spans) >= r.bound * (1 - 1e-9)
        if r.packing == SPLIT:  # no long solve; as many microbatches as data order with documents split
            assert len(spans) == 4 and r.solve is None and r.microbatches <= rows[0].microbatches
        else:
            assert len(spans) == 5 and r.solve <= r.plan + 1e-6 and r.cut == 0  # the solve starts from the plan


def test_the_command_writes_its_section_and_renders_it_again(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from benchmarks.reports import long_context

    monkeypatch.setattr(long_context, "rank_partitions", lambda make, start: ([SimpleNamespace(partition=start)], 1))
    section, table, figures = tmp_path / "section.md", tmp_path / "table.md", tmp_path / "figures.json"
    args = ["--batches", "2", "--microbatches", "8", "--lengths", str(BUDGET), "--plan-time", "0.05",
            "--solve-time", "0.3", "--solve-batches", "1"]
    assert main(args + ["--section", str(section), "--table", str(table), "--json", str(figures)]) == 0
    whole = table.read_text()
    assert "| 8K | sequential |" in whole and "| 8K | balance |" in whole and "Targets at 8K" in whole
    assert f"| 8K | {SPLIT} |" in whole and "With `--split-documents`" in whole
    assert "Targets at 8K" in section.read_text() and "table.md)" in section.read_text()
    assert len(json.loads(figures.read_text())["rows"]) == 6
    again = tmp_path / "again.md"
    assert main(["--render", str(figures), "--table", str(again)]) == 0
    assert again.read_text() == whole  # the same figures, options and the command that measured them
    # --add measures only the packings the figures lack, and says so
    figures_before = figures.read_text()
    data = json.loads(figures_before)
    data["rows"] = [{**r, "work": None} for r in data["rows"] if r["packing"] != SPLIT]
    figures.write_text(json.dumps(data))
    assert main(["--render", str(figures), "--table", str(again)]) == 0
    assert f"| 8K | {SPLIT} | - |" in again.read_text()  # rendered without them
    assert main(["--add", str(figures), "--table", str(again)]) == 0
    added = json.loads(figures.read_text())
    assert [r["packing"] for r in added["rows"]].count(SPLIT) == 2 and added["command"] == data["command"]
    assert "--add" in added["options"]["added"] and "Its rows were added by" in again.read_text()
    work = lambda rows: {(r["batch"], r["packing"]): pytest.approx(r["work"]) for r in rows}  # noqa: E731
    assert work(added["rows"]) == work(json.loads(figures_before)["rows"])  # filled in again where missing
