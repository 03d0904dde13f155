"""docs/cli.md is what docs/cli_reference.py renders from the parsers, so it cannot drift from --help."""

from __future__ import annotations

import importlib.util

from tests.helpers import ROOT


def _reference():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "docs" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_is_the_parsers_reference():
    assert (ROOT / "docs" / "cli.md").read_text() == _reference().markdown(), \
        "docs/cli.md is stale: run python -m docs.cli_reference > docs/cli.md"


def test_every_command_and_option_is_in_it():
    reference = _reference()
    text = (ROOT / "docs" / "cli.md").read_text()
    for name, _, parser in reference.every_command():
        assert f"## `ppsolve {name}`" in text
        assert name in reference.PAGES
        for action in parser._actions:
            for option in set(action.option_strings) - {"-h", "--help"}:
                assert f"`{option}" in text, (name, option)
