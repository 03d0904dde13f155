"""Microbatches of different sequence lengths (``x-microbatch-tokens``; ``x-token-budget`` pads them
to one shape): per-microbatch problems in permuted 1F1B orders run on 2 gloo ranks with ppsolve's
runtime (each microbatch at its length) and PyTorch's (padded); gradients equal a single-process run
of the unpadded microbatches, measured activation bytes equal the problem's per microbatch, and the
measured peak the predicted one."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from tests.executor.helpers import (MODELS, make, mixed_levers, per_microbatch, permuted,  # noqa: E402
                                    pipelined_orders, problem)
from tests.helpers import one_f_one_b_orders  # noqa: E402

from ppsolve.checker import check  # noqa: E402
from ppsolve.cli import main  # noqa: E402
from ppsolve.errors import InputError  # noqa: E402
from ppsolve.executor import models  # noqa: E402
from ppsolve.executor.api import TOLERANCE, execute, execute_all, prepare  # noqa: E402
from ppsolve.executor.spec import load_model_spec  # noqa: E402
from ppsolve.executor.tokens import Lengths, lengths_of  # noqa: E402
from ppsolve.problem import load_problem, problem_from_dict  # noqa: E402

GPT = MODELS / "gpt-tiny.json"  # sequence 8
TOKENS = [8, 3, 5, 1]
PERM = [2, 0, 3, 1]  # microbatch 2 first, 1 last
TIMEOUT_S = 120.0


def _annotated(prob, budget: int | None = None):
    data = prob.to_dict()
    data["x-microbatch-tokens"] = TOKENS
    if budget is not None:
        data["x-token-budget"] = budget
    return problem_from_dict(data)


def _profiled(tmp_path, *options: str):
    out = tmp_path / "p.json"
    assert main(["profile", "--model", str(GPT), "--devices", "2", "--microbatches", "4", "--repeats", "1",
                 "--device", "cpu", "--microbatch-tokens", ",".join(map(str, TOKENS)), *options, "-o", str(out)]) == 0
    return load_problem(out)


def _permuted_1f1b(prob, name: str = "permuted-1f1b"):
    schedule = make(prob, permuted(one_f_one_b_orders(prob), PERM), name)
    assert check(schedule).ok
    return schedule


def _mixed_vshape(budget: int | None = None):
    """V-shape, both levers, per-microbatch costs and tokens, in a permuted order (half-duplex link:
    the CPU's synchronous copies never overlap a reload with an offload)."""
    prob = problem(2, 4, chunks=2, placement="vshape", offload=True, keep=0.25, duplex=False)
    prob = _annotated(per_microbatch(prob, [t / 8 for t in TOKENS]), budget)
    pairs = [(s, j) for s in range(prob.num_stages) for j in range(4)]
    return mixed_levers(prob, permuted(pipelined_orders(prob, lag=2, w_delay=1), PERM),
                        {p for p in pairs if sum(p) % 3 == 0}, {p for p in pairs if sum(p) % 3 == 1})


def _assert_ran(outcomes: dict) -> None:
    for name, outcome in outcomes.items():
        c = outcome.comparison
        assert c.ok(TOLERANCE), (name, c.max_error, c.worst, c.missing)
        for fig in outcome.figures:
            assert fig.measured_peak == fig.predicted_peak > 0, (name, fig.rank, fig.measured_peak, fig.predicted_peak)


def _bytes(outcome) -> dict[int, list[int]]:
    return {s: sizes for r in outcome.results for s, sizes in r.activation_bytes.items()}


def test_microbatch_data_is_a_prefix_of_the_full_one_and_padding_leaves_the_loss_alone():
    spec = load_model_spec(GPT)
    full_x, full_t = models.microbatch(spec, 1)
    x, t = models.microbatch(spec, 1, Lengths(tuple(TOKENS)))
    assert x.shape == (2, 3) and torch.equal(x, full_x[:, :3]) and torch.equal(t, full_t[:, :3])
    px, pt = models.microbatch(spec, 1, Lengths(tuple(TOKENS), budget=8))
    assert px.shape == (2, 8) and torch.equal(px[:, :3], x) and (pt[:, 3:] == models.PAD_TARGET).all()
    model, loss = models.build_full(spec), models.loss_fn(spec)
    assert torch.allclose(loss(model(px), pt), loss(model(x), t), atol=1e-6)  # causal: no real token sees padding


def test_bad_token_annotations_are_refused_naming_the_field(tmp_path, capsys):
    with pytest.raises(InputError, match=r"problem.x-microbatch-tokens\[1\]: must be an integer token count in "
                                         r"\[1, 8\], got 9"):
        lengths_of({"x-microbatch-tokens": [8, 9, 1, 1]}, 4, 8)
    with pytest.raises(InputError, match=r"x-microbatch-tokens\[0\]: .* \[1, 6\], got 8"):
        lengths_of({"x-microbatch-tokens": TOKENS, "x-token-budget": 6}, 4, 8)
    with pytest.raises(InputError, match="must be a list of 4 token counts"):
        lengths_of({"x-microbatch-tokens": [8, 3]}, 4, 8)
    with pytest.raises(InputError, match="x-token-budget: needs"):
        lengths_of({"x-token-budget": 8}, 4, 8)
    with pytest.raises(InputError, match="needs a transformer model"):
        lengths_of({"x-microbatch-tokens": TOKENS}, 4, None)
    with pytest.raises(InputError, match="x-token-budget: is needed by `runtime` torch"):
        prepare(_permuted_1f1b(_annotated(problem(2, 4))), GPT, None, "torch")
    path = tmp_path / "s.json"
    _permuted_1f1b(_annotated(problem(2, 4))).save(path)
    assert main(["run", str(path), "--model", str(MODELS / "mlp-tiny.json")]) == 2
    err = capsys.readouterr().err
    assert "problem.x-microbatch-tokens: needs a transformer model" in err and err.count("\n") == 1


def test_profile_tokens_then_run_measures_the_predicted_bytes_of_every_microbatch(tmp_path, capsys):
    prob = _profiled(tmp_path)
    assert prob.activation.per_microbatch and prob.forward.per_microbatch
    profiled = json.loads((tmp_path / "p.json").read_text())["x-profile"]["activation_bytes"]
    for row in profiled:  # longer sequences save more
        assert sorted(row) == [row[TOKENS.index(t)] for t in sorted(TOKENS)] and len(set(row)) == 4
    path = tmp_path / "s.json"
    _permuted_1f1b(prob).save(path)
    capsys.readouterr()
    assert main(["run", str(path), "--model", str(GPT), "--check", "--device", "cpu", "--steps", "1",
                 "--timeout", str(TIMEOUT_S)]) == 0
    text = capsys.readouterr().out
    assert ": OK" in text
    assert "activation bytes per microbatch, measured against the problem's: 8 of 8 (stage, microbatch) equal" in text
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 2 and all(r[1] == r[2] for r in rows)  # measured peak == predicted, every rank


def test_ppsolve_runtime_runs_each_microbatch_at_its_length():
    cases = {"1f1b-fused": _permuted_1f1b(_annotated(problem(2, 4, split=False))),
             "mixed-vshape": _mixed_vshape()}
    outcomes = dict(zip(cases, execute_all(list(cases.values()), GPT, check=True, device="cpu",
                                           timeout_s=TIMEOUT_S)))
    _assert_ran(outcomes)
    for outcome in outcomes.values():
        for s, sizes in _bytes(outcome).items():
            assert [sizes[TOKENS.index(t)] for t in sorted(TOKENS)] == sorted(set(sizes)), s  # 4 sizes, by length


@pytest.mark.slow
def test_ordered_channels_size_each_receive_by_its_microbatch():
    # NCCL's protocol (receives posted in channel order when needed) on gloo: each buffer takes the
    # shape of the message it receives, whose microbatch the channel order names
    outcome = execute(_mixed_vshape(), GPT, check=True, device="cpu", comm="ordered", timeout_s=TIMEOUT_S)
    _assert_ran({"mixed-vshape-ordered": outcome})
    assert all(len(set(sizes)) == 4 for sizes in _bytes(outcome).values())


@pytest.mark.slow
def test_torch_runtime_pads_every_microbatch_to_the_budget(tmp_path):
    prob = _profiled(tmp_path, "--token-budget", "8")
    assert not prob.activation.per_microbatch and prob.forward.per_microbatch  # padded memory, real-token times
    cases = {"profiled-1f1b": _permuted_1f1b(prob), "mixed-vshape": _mixed_vshape(budget=8)}
    outcomes = dict(zip(cases, execute_all(list(cases.values()), GPT, check=True, runtime="torch", device="cpu",
                                           timeout_s=TIMEOUT_S)))
    _assert_ran(outcomes)
    assert outcomes["profiled-1f1b"].activations.differing == []
    for outcome in outcomes.values():
        assert all(len(set(sizes)) == 1 for sizes in _bytes(outcome).values())  # one shape
    for result in outcomes["profiled-1f1b"].results:  # PyTorch ran the permuted order
        first = next(a for a in result.executed if "F" in a and "SEND" not in a and "RECV" not in a)
        assert first.endswith(f"F{PERM[0]}")
