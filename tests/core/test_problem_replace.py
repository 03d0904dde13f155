"""Problem.replace builds the changed problem directly: the same as loading its file again."""

from __future__ import annotations

import pytest

from ppsolve.errors import InputError
from ppsolve.problem import OffloadConfig, load_problem, problem_from_dict
from tests.helpers import ROOT, make_problem

CHANGES = [dict(capacity=None), dict(capacity=3.5), dict(capacity=(1.0, 2.0, 3.0, 4.0)), dict(offload=None),
           dict(recompute=None), dict(recompute={"keep": 0.25, "time": 1}), dict(name="changed"),
           dict(offload={"fraction": 0.5, "bandwidth": {"d2h": 10, "h2d": 5}}, capacity=2)]


@pytest.mark.parametrize("path", ["example.json", "linear-offload-shared-4x8.json"])
@pytest.mark.parametrize("changes", CHANGES, ids=lambda c: ",".join(c))
def test_replace_equals_loading_the_changed_file(path, changes):
    problem = load_problem(ROOT / "instances" / path)
    if isinstance(changes.get("capacity"), tuple):
        changes = dict(changes, capacity=changes["capacity"][:1] * problem.devices)
    changed = problem.replace(**changes)
    again = problem_from_dict(changed.to_dict())
    assert changed == again and changed.to_dict() == again.to_dict()
    assert changed.placement == again.placement and changed.annotations == again.annotations
    assert changed.can_offload == again.can_offload and changed.can_recompute == again.can_recompute
    assert changed.total_compute == again.total_compute


def test_replace_keeps_a_config_object_and_names_a_bad_value():
    problem = make_problem(offload={"fraction": 1, "bandwidth": {"d2h": 4, "h2d": 4}})
    config = problem.offload
    assert isinstance(config, OffloadConfig) and make_problem().replace(offload=config).offload is config
    with pytest.raises(InputError, match=r"capacity\[1\]: must be >= 0"):
        problem.replace(capacity=[1, -1])
    with pytest.raises(InputError, match="capacity: must have 2 entries"):
        problem.replace(capacity=[1, 2, 3])
    with pytest.raises(InputError, match=r"recompute.keep: must be <= activation"):
        problem.replace(recompute={"keep": 2})
    with pytest.raises(TypeError):
        problem.replace(devices=3)
