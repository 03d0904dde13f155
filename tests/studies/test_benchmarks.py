"""The benchmarks folder: every script imports, runs as a module through the shared harness, reaches
into no private part of the package, is listed in benchmarks/README.md, and regenerate.sh names only
scripts that exist and nothing outside the repository unless asked."""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from benchmarks import harness
from tests.helpers import ROOT

BENCHMARKS = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*/*.py") if p.name != "__init__.py")
MODULES = ["benchmarks." + ".".join(p.relative_to(BENCHMARKS).with_suffix("").parts) for p in SCRIPTS]


def test_the_scripts_are_in_the_two_folders():
    assert {p.parent.name for p in SCRIPTS} == {"makers", "reports"}
    assert sorted(p.name for p in BENCHMARKS.glob("*.py")) == ["__init__.py", "harness.py"]


@pytest.mark.parametrize("module", MODULES)
def test_every_script_imports(module):
    importlib.import_module(module)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_no_script_patches_sys_path_or_uses_private_package_names(path):
    tree = ast.parse(path.read_text())
    imported = {}  # local name -> the ppsolve module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ppsolve"):
            assert not any(_private(a.name) for a in node.names), f"{path.name}: imports a private name"
            imported.update({a.asname or a.name: node.module for a in node.names})
        elif isinstance(node, ast.Import):
            imported.update({a.asname or a.name: a.name for a in node.names if a.name.startswith("ppsolve")})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            assert not (node.value.id == "sys" and node.attr == "path"), f"{path.name} touches sys.path"
            assert not (_private(node.attr) and node.value.id in imported), f"{path.name}: {node.value.id}.{node.attr}"


def test_the_readme_lists_every_script():
    readme = (BENCHMARKS / "README.md").read_text()
    missing = [p.name for p in SCRIPTS if f"`{p.name}`" not in readme]
    assert not missing


def test_regenerate_runs_existing_modules_and_the_reference_only_when_asked():
    script = (BENCHMARKS / "regenerate.sh").read_text()
    modules = re.findall(r"\$PY -m (benchmarks\.[\w.]+)", script)
    assert modules and set(modules) <= set(MODULES)
    assert "benchmarks.makers.suite" in modules and "benchmarks.reports.write_benchmarks_md" in modules
    for line in script.splitlines():
        if "$PY " in line and ("../" in line or "reports.reference" in line):
            assert line.startswith('if [ -n "$REFERENCE" ]'), line


def test_harness_parser_gives_the_common_options_with_their_defaults(tmp_path):
    parser = harness.parser("What it measures.\n\nMore.", problems=True, time_limit=300.0, threads=None,
                            section=None)
    args = parser.parse_args([])
    assert (args.problems, args.time_limit, args.threads, args.section) == ([], 300.0, None, None)
    args = parser.parse_args(["a.json", "--time-limit", "5", "--threads", "1", "--section", str(tmp_path / "s.md")])
    assert (args.problems[0].name, args.time_limit, args.threads, args.section.name) == ("a.json", 5.0, 1, "s.md")
    assert parser.description == "What it measures."
    with pytest.raises(SystemExit):
        parser.parse_args(["--jobs", "2"])  # not asked for


def test_write_section_makes_its_folder_and_ends_in_one_newline(tmp_path):
    target = tmp_path / "sections" / "x.md"
    harness.write_section(target, "## Title\n\ntext\n\n")
    assert target.read_text() == "## Title\n\ntext\n"
    assert [p.name for p in target.parent.iterdir()] == ["x.md"]  # no temporary file left


def test_command_names_the_module_and_quotes_its_arguments():
    from benchmarks.reports import offload_table

    assert harness.command(offload_table.__spec__, "--heading", "a b") == \
        "python -m benchmarks.reports.offload_table --heading 'a b'"
