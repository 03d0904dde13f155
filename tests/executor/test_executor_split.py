"""B/W split of one stage: same gradients as one fused backward, and W never re-runs B."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.executor.helpers import MODELS  # noqa: E402

from ppsolve.executor import models, split  # noqa: E402
from ppsolve.executor.spec import load_model_spec  # noqa: E402


class Shared(torch.nn.Module):
    """One linear used twice (its parameter branches meet two intermediates), then a norm."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.lin = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.lin(torch.tanh(self.lin(x))) + x)


def _split_grads(module, x, grad):
    params = list(module.parameters())
    inputs = x.clone().requires_grad_(True)
    calls = []
    inputs.register_hook(lambda g: calls.append(1))
    out = module(inputs)
    plan = split.plan_split(out, inputs, params)
    assert plan is not None
    grad_in = split.backward_input(out, inputs, grad, plan)
    assert len(calls) == 1
    del out
    weights = split.backward_weight(plan, params)
    assert len(calls) == 1  # W did not go back through the input path
    return grad_in, weights


def _fused_grads(module, x, grad):
    params = list(module.parameters())
    inputs = x.clone().requires_grad_(True)
    grads = torch.autograd.grad(module(inputs), [inputs] + params, grad)
    return grads[0], list(grads[1:])


@pytest.mark.parametrize("which", ["gpt", "mlp", "shared"])
def test_split_equals_fused(which):
    if which == "shared":
        module, x = Shared(), torch.randn(3, 8)
    else:
        spec = load_model_spec(MODELS / f"{which}-tiny.json")
        module = models.build_stages(spec, 4)[1]
        x = torch.randn(models.boundary_shape(spec))
    grad = torch.randn_like(module(x))
    b_in, b_w = _split_grads(module, x, grad)
    f_in, f_w = _fused_grads(module, x, grad)
    assert torch.allclose(b_in, f_in, atol=1e-6)
    assert len(b_w) == len(f_w)
    for got, want in zip(b_w, f_w):
        assert got is not None and torch.allclose(got, want, atol=1e-6)


def test_no_plan_when_output_ignores_input():
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4, requires_grad=True)
    out = lin(torch.ones(2, 4)) + 0 * x.detach()
    assert split.plan_split(out, x, list(lin.parameters())) is None
