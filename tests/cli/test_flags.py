"""The library names fields and parameters in its errors; only ``commands/`` knows the flags.

A scan of the source: outside ``ppsolve/commands`` (and ``cli.py``) no string that starts with a flag
is passed to a call or is a parameter's default (the ``where`` of an error), and no InputError's text
names a flag. Then one error, from the library and from the command line.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.helpers import ROOT

from ppsolve.cli import main
from ppsolve.commands.flags import FLAGS, flag_of
from ppsolve.costmodel import Layout, Parallelism, build_problem, even_partition, hardware_of_gpu, load_transformer
from ppsolve.errors import InputError

PACKAGE = ROOT / "ppsolve"
COMMAND_LINE = (PACKAGE / "commands", PACKAGE / "cli.py", PACKAGE / "__main__.py")
FLAG = re.compile(r"--[a-z]")
LLAMA = ROOT / "models" / "transformers" / "llama-3-8b-like.json"


def _library_files():
    return [path for path in sorted(PACKAGE.rglob("*.py"))
            if not any(path == place or place in path.parents for place in COMMAND_LINE)]


def _text(node: ast.AST) -> str:
    """The literal text of a string or an f-string (its constant parts), else ''."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return ""


def _flags_named(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            given = [*node.args, *(k.value for k in node.keywords)]
            is_input_error = getattr(node.func, "id", getattr(node.func, "attr", None)) == "InputError"
            for arg in given:
                text = _text(arg)
                if FLAG.match(text) or (is_input_error and FLAG.search(text)):
                    found.append((node.lineno, text))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None and FLAG.match(_text(default)):
                    found.append((node.lineno, _text(default)))
    return found


def test_the_library_names_no_flag_in_its_errors():
    files = _library_files()
    assert len(files) > 50  # the scan reads the package
    named = {str(path.relative_to(ROOT)): found for path in files
             if (found := _flags_named(ast.parse(path.read_text(encoding="utf-8"))))}
    assert named == {}


def test_the_scan_finds_a_flag():
    source = ('def f(text, where="--size"):\n'
              '    raise InputError("--tensor-parallel", "x")\n'
              'def g(t):\n'
              '    raise InputError("layout.parallel.tensor", f"needs --tensor-parallel {t}")\n'
              'check(x, "--time-limit")\n')
    assert sorted(line for line, _ in _flags_named(ast.parse(source))) == [1, 2, 4, 5]


def test_a_field_becomes_the_flag_only_where_the_command_has_it():
    options = {"--shrink", "--model", "--partition", "--tensor-parallel"}
    assert flag_of("layout.parallel.tensor", options) == "--tensor-parallel"
    assert flag_of("shrink.layers", options) == "--shrink.layers"
    assert flag_of("partition[2]", options) == "--partition[2]"
    assert flag_of("model", options) == "--model"
    assert flag_of("model.layers", options) is None  # a field of the model file keeps its name
    assert flag_of("shrinking", options) is None
    assert flag_of("model", {"--output"}) is None  # ``ppsolve problem MODEL``: the model is no flag
    assert all(flag.startswith("--") for flag in FLAGS.values())


def test_an_impossible_tensor_parallel_degree_names_the_field_in_python_and_the_flag_on_the_command_line(
        tmp_path, capsys):
    model = load_transformer(LLAMA)
    layout = Layout(devices=4, microbatches=8, parallel=Parallelism(tensor=3))
    with pytest.raises(InputError) as err:
        build_problem(model, hardware_of_gpu("H100"), layout, even_partition(model.layers, 4))
    assert err.value.field == "layout.parallel.tensor"
    assert str(err.value) == f"layout.parallel.tensor: 3 does not divide the model's heads ({model.heads})"
    with pytest.raises(InputError) as err:
        Parallelism(sequence=True)
    assert str(err.value) == ("layout.parallel.sequence: needs `layout.parallel.tensor` > 1 (it splits the "
                              "sequence over the tensor-parallel ranks)")

    out = tmp_path / "p.json"
    common = ["problem", str(LLAMA), "--gpu", "H100", "--devices", "4", "--microbatches", "8", "-o", str(out)]
    assert main([*common, "--tensor-parallel", "3"]) == 2
    assert capsys.readouterr().err == ("ppsolve problem: error: --tensor-parallel: 3 does not divide the model's "
                                       f"heads ({model.heads})\n")
    assert main([*common, "--sequence-parallel"]) == 2
    assert capsys.readouterr().err == ("ppsolve problem: error: --sequence-parallel: needs --tensor-parallel > 1 "
                                       "(it splits the sequence over the tensor-parallel ranks)\n")
    assert not out.exists()
