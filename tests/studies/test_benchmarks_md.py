"""BENCHMARKS.md stays a summary: long tables move to files it links (benchmarks/reports/write_benchmarks_md.py)."""

from benchmarks.reports import write_benchmarks_md as wbm
from tests.helpers import ROOT


def _table(rows: int, tag: str = "r") -> str:
    return "\n".join(["| a | b |", "|---|---|"] + [f"| {tag}{i} | {i} |" for i in range(rows)])


def test_a_long_table_becomes_a_link_and_a_short_one_stays():
    text = f"## S\n\nprose\n\n{_table(3, 's')}\n\nmore\n\n{_table(40, 'l')}\n\nafter\n"
    summary, moved = wbm.summarise(text, "docs/bench/tables/s.md", limit=15)
    assert moved
    assert "| s2 | 2 |" in summary and "| l0 | 0 |" not in summary
    assert "Table of 40 rows: [docs/bench/tables/s.md](docs/bench/tables/s.md)." in summary
    assert summary.index("more") < summary.index("Table of 40") < summary.index("after")
    assert wbm.summarise(_table(15), "x.md", limit=15) == (_table(15) + "\n", False)


def test_adjacent_long_tables_share_one_link():
    text = f"## S\n\n{_table(20)}\n\n{_table(30)}\n\nend\n"
    summary, _ = wbm.summarise(text, "t.md", limit=15)
    assert summary.count("t.md)") == 1 and "Tables of 20 and 30 rows" in summary and summary.endswith("end\n")


def test_tables_folder_holds_the_whole_section_and_drops_stale_files(tmp_path):
    folder = tmp_path / "docs" / "bench" / "tables"
    folder.mkdir(parents=True)
    (folder / "stale.md").write_text("old")
    tables = wbm.Tables(folder, tmp_path)
    long_text = f"## Long\n\n{_table(30)}\n"
    assert "docs/bench/tables/long.md" in tables.place("long", long_text)
    assert tables.place("short", f"## Short\n\n{_table(2)}\n") == f"## Short\n\n{_table(2)}\n"
    tables.prune()
    assert sorted(p.name for p in folder.iterdir()) == ["long.md"]
    assert long_text.strip() in (folder / "long.md").read_text()


def test_solver_compare_counts_the_proofs_of_each_backend():
    table = ("| problem | cpsat status | makespan | milp status | makespan |\n|---|---|---|---|---|\n"
             "| a | optimal | 1 | feasible | 2 |\n| b | optimal | 1 | optimal | 1 |\n| c | feasible | 3 | feasible | 3 |")
    assert wbm.solver_compare_counts(table) == "Of the 3 problems, cpsat proves 2 and milp proves 1 optimal."


def test_sections_that_are_only_a_link_become_list_items():
    linked = ["### Methods\n\nTable of 22 rows: [m.md](m.md).\n", "### Problems\n\nTable of 47 rows: [p.md](p.md).\n"]
    assert wbm.compact(linked) == ["- Methods: table of 22 rows: [m.md](m.md).\n"
                                    "- Problems: table of 47 rows: [p.md](p.md).\n"]
    inline = ["### Methods\n\n| a |\n|---|\n| x |\n", linked[1]]
    assert wbm.compact(inline) == inline


def test_no_doc_tells_the_history_of_a_session():
    # that is git log's job
    docs = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for path in docs:
        text = path.read_text().lower()
        assert "session 1" not in text and "session 2" not in text, path
