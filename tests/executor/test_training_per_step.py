"""A plan per training step (``ppsolve.executor.training``): packed documents with document-masked attention,
checked against one process running each document alone; ``examples/train_per_step.py`` run as documented on
2 CPU ranks through both runtimes, a different plan every step."""

from __future__ import annotations

import json
import multiprocessing
import re
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from ppsolve.costmodel.descriptions import transformer_from_dict  # noqa: E402
from ppsolve.errors import InputError  # noqa: E402
from ppsolve.executor import models  # noqa: E402
from ppsolve.executor.reference import documents_reference  # noqa: E402
from ppsolve.executor.spec import spec_of_transformer  # noqa: E402
from ppsolve.executor.training import PipelineRank, StepBatch  # noqa: E402
from ppsolve.schedule import make_schedule  # noqa: E402
from ppsolve.simulator import simulate  # noqa: E402
from tests.executor.helpers import mixed_levers, pipelined_orders, problem  # noqa: E402
from tests.helpers import ROOT  # noqa: E402

LLAMA = {"format": "ppsolve/transformer@1", "name": "tiny-llama", "layers": 2, "hidden": 32, "heads": 4,
         "kv_groups": 2, "sequence": 16, "micro_batch_size": 1, "vocabulary": 64, "norm": "rmsnorm",
         "position": "rotary", "gated_mlp": True, "bias": False}
GPT = {**LLAMA, "name": "tiny-gpt", "kv_groups": 4, "norm": "layernorm", "position": "learned", "gated_mlp": False,
       "bias": True}


def _batch(lengths: list[list[int]], budget: int = 16) -> StepBatch:
    gen = torch.Generator().manual_seed(7)
    return StepBatch(tuple(tuple(torch.randint(64, (n + 1,), generator=gen) for n in mb) for mb in lengths), budget)


def _packed_gradients(model, batch: StepBatch, documents=lambda d: d) -> dict:
    """The step's gradients with every microbatch packed at the budget and its mask from ``documents``."""
    model.zero_grad(set_to_none=True)
    for j in range(batch.microbatches):
        x, target, docs = batch.tensors(j)
        loss = models.loss_fn(spec_of_transformer(transformer_from_dict(LLAMA)))(model(x, documents(docs)), target)
        (loss / batch.microbatches).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def _largest_error(a: dict, b: dict) -> float:
    assert set(a) == set(b)
    return max(float((a[n] - b[n]).abs().max()) for n in a)


@pytest.mark.parametrize("description", [LLAMA, GPT], ids=["rotary", "learned"])
def test_packed_documents_with_their_mask_train_as_each_document_alone(description):
    spec = spec_of_transformer(transformer_from_dict(description))
    model = models.build_full(spec)
    batch = _batch([[5, 3, 6], [16], [1, 2, 9]])
    alone = documents_reference(model, batch.documents).grads
    assert _largest_error(_packed_gradients(model, batch), alone) < 1e-5
    # the same packing under a plain causal mask (every document sees the ones before it) is another step
    assert _largest_error(_packed_gradients(model, batch, lambda d: (d >= 0).long()), alone) > 1e-3


def test_step_batch_packs_documents_after_one_another_and_pads_out_of_the_loss():
    batch = _batch([[2, 3], [4]], budget=6)
    x, target, docs = batch.tensors(0)
    first, second = batch.documents[0]
    assert x[0, :5].tolist() == first[:-1].tolist() + second[:-1].tolist()
    assert target[0, :5].tolist() == first[1:].tolist() + second[1:].tolist()
    assert docs[0].tolist() == [0, 0, 1, 1, 1, -1] and target[0, 5] == models.PAD_TARGET
    assert models.positions(docs)[0].tolist() == [0, 1, 0, 1, 2, 0]
    assert batch.lengths == [[2, 3], [4]]


def test_bad_batches_and_schedules_are_refused_naming_the_field():
    with pytest.raises(InputError, match=r"batch\.documents\[0\]: holds 7 tokens, more than the token budget of 6"):
        _batch([[3, 4]], budget=6)
    with pytest.raises(InputError, match=r"batch\.documents\[1\]: an empty microbatch"):
        StepBatch((tuple(_batch([[2]]).documents[0]), ()), 6)
    with pytest.raises(InputError, match=r"batch\.documents\[0\]\[0\]: must be a 1-D tensor of at least 2"):
        StepBatch(((torch.tensor([5]),),), 6)
    spec = spec_of_transformer(transformer_from_dict({**LLAMA, "layers": 4}))
    two = problem(2, 2)
    rank = PipelineRank(spec, two, 0)
    assert set(rank.modules) == {0}
    schedule = make_schedule(two, simulate(two, pipelined_orders(two, lag=1)), "pipelined")
    with pytest.raises(InputError, match=r"batch: has 3 microbatches, the schedule 2"):
        rank.step(schedule, _batch([[2], [3], [4]]))
    with pytest.raises(InputError, match=r"runtime: must be one of ppsolve, torch"):
        rank.step(schedule, _batch([[2], [3]]), runtime="tf")
    with pytest.raises(InputError, match=r"batch.budget: must be at most the model's sequence, got 32"):
        rank.step(schedule, _batch([[2], [3]], budget=32))
    four = problem(2, 2, chunks=2, placement="interleaved")
    other = make_schedule(four, simulate(four, pipelined_orders(four, lag=1)), "pipelined")
    with pytest.raises(InputError, match=r"schedule: is for another pipeline"):
        rank.step(other, _batch([[2], [3]]))


@pytest.mark.slow
def test_the_example_plans_and_checks_every_step_on_two_ranks_through_both_runtimes():
    run = subprocess.run([sys.executable, str(ROOT / "examples" / "train_per_step.py"), "--steps", "3"],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    steps = re.findall(r"^step (\d): (\d) microbatches .* documents (.*); plan .*: (.*)$", run.stdout, re.M)
    assert [s[0] for s in steps] == ["0", "1", "2"], run.stdout
    assert len({s[2] for s in steps}) == 3  # every step its own documents
    assert len({s[3] for s in steps}) == 3  # and its own plan
    checks = re.findall(r"^  (ppsolve|torch) runtime: loss [\d.]+; largest error ([\d.e+-]+) .*: OK$", run.stdout, re.M)
    assert [c[0] for c in checks] == ["ppsolve", "torch"] * 3, run.stdout
    assert all(float(c[1]) <= 1e-5 for c in checks)


def _levers_schedule():
    """2 devices, 4 microbatches: three (stage, microbatch) recomputed, three offloaded."""
    prob = problem(2, 4, offload=True, keep=0.25, duplex=False)
    return mixed_levers(prob, pipelined_orders(prob, lag=1), {(0, 0), (1, 2), (0, 3)}, {(0, 1), (0, 2), (1, 1)})


def _levers_rank(rank: int, port: int, out: str) -> None:
    """One rank: the levers schedule on packed documents through both runtimes, errors against the reference."""
    import torch.distributed as dist

    from ppsolve.executor.training import compare_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        schedule, spec = _levers_schedule(), spec_of_transformer(transformer_from_dict(LLAMA))
        batch = _batch([[5, 3, 6], [16], [1, 2, 9], [4, 4]])
        reference = documents_reference(models.build_full(spec), batch.documents)
        pipe, errors = PipelineRank(spec, schedule.problem, rank), {}
        for runtime in ("ppsolve", "torch"):
            for module in pipe.modules.values():
                module.zero_grad(set_to_none=True)
            result = pipe.step(schedule, batch, runtime)
            comparison = compare_step(reference, result, pipe.modules)
            errors[runtime] = (comparison.max_error, comparison.missing, sorted(result.losses),
                               sorted({r.kind for r in result.records}))
        with open(f"{out}/rank{rank}.json", "w") as handle:
            json.dump(errors, handle)
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_recompute_and_offload_replay_each_microbatch_documents_in_both_runtimes(tmp_path):
    schedule = _levers_schedule()
    assert schedule.recomputed and schedule.offloaded
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_levers_rank, args=(r, port, str(tmp_path))) for r in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(300)
    assert [p.exitcode for p in procs] == [0, 0]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, errors in enumerate(ranks):
        for runtime, (error, missing, losses, kinds) in errors.items():
            assert error <= 1e-5 and not missing, (rank, runtime, error, missing)
            assert losses == ([0, 1, 2, 3] if rank == 1 else [])
            assert {"R", "OFFLOAD", "RELOAD"} <= set(kinds) if rank == 0 else "R" in kinds
