"""Fixtures shared by the executor tests."""

from __future__ import annotations

import json

import pytest

from tests.executor.helpers import MODELS


@pytest.fixture(scope="session")
def mlp8(tmp_path_factory):
    """models/mlp-tiny.json with 8 layers, enough for 8 stages."""
    data = json.loads((MODELS / "mlp-tiny.json").read_text())
    data["layers"] = 8
    path = tmp_path_factory.mktemp("models") / "mlp-8.json"
    path.write_text(json.dumps(data))
    return path
