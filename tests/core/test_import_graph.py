"""The package's import graph: no cycle, and no import runs back up a layer.

Edges are read from the source (every ``import``, at module level or inside a
function) plus every string constant that names a package module (a module
imported by name, e.g. a backend registry); an f-string prefix such as
``f"ppsolve.commands.{name}"`` stands for every module under it.
"""

from __future__ import annotations

import ast

import networkx as nx

from tests.helpers import ROOT

PACKAGE = ROOT / "ppsolve"

# Lowest first; a module may import its own layer or any below. Keys are the top-level names under ppsolve.
LAYERS = (
    ("errors", "jsonio", "limits", "schemas", "ops", "costs", "problem", "levers", "dependencies", "memory",
     "schedule", "gcpause", "tolerance", "units", "metric_warnings"),
    ("simulator", "checker", "method_types"),
    ("bounds",),
    ("baselines", "solvers"),
    ("methods",),
    ("planning", "planner", ""),  # "": the package itself (re-exports the data, simulate, solve and Planner)
    ("studies", "costmodel", "export"),
    ("plot", "executor"),
    ("commands", "cli", "__main__"),
)
LAYER = {name: index for index, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, object]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(node: ast.AST, module: str, is_package: bool, modules) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            here = module.split(".") if is_package else module.split(".")[:-1]
            here = here[:len(here) - node.level + 1]
            base = ".".join(here + ([node.module] if node.module else []))
        # "from pkg import sub" depends on pkg.sub (pkg is an ancestor, loaded first in any case)
        subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules]
        return subs if len(subs) == len(node.names) else [base, *subs]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules:
        return [node.value]
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        prefix = str(node.values[0].value)
        if prefix.startswith("ppsolve.") and prefix.endswith("."):
            return [name for name in modules if name.startswith(prefix)]
    return []


def import_graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _targets(node, module, is_package, modules):
                if target in modules and target != module:
                    graph.add_edge(module, target)
    return graph


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYER[parts[1] if len(parts) > 1 else ""]


def test_the_graph_sees_the_imports():
    graph = import_graph()
    assert graph.has_edge("ppsolve.methods", "ppsolve.baselines")  # a function-level import
    assert graph.has_edge("ppsolve.solvers.backends", "ppsolve.solvers.cpsat.backend")  # a module named by a string
    assert graph.has_edge("ppsolve.cli", "ppsolve.commands.solve")  # an f-string prefix


def test_no_import_cycle():
    cycles = list(nx.simple_cycles(import_graph()))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + c[:1]) for c in cycles[:5])


def test_every_top_level_name_has_a_layer():
    assert {m.split(".")[1] for m in _modules() if "." in m} <= set(LAYER)


def test_no_import_runs_back_up_a_layer():
    upward = [f"{a} -> {b}" for a, b in import_graph().edges if _layer(b) > _layer(a)]
    assert not upward, "imports from a higher layer: " + ", ".join(sorted(upward))
