"""Device selection, the refusal of --device cuda without CUDA, the CPU device's
transfers, and the NCCL message protocol (ordered channels) run on gloo."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.executor.helpers import MODELS, add_offload, make, pipelined_orders, problem, run_schedule_and_compare  # noqa: E402

from ppsolve.errors import InputError  # noqa: E402
from ppsolve.executor.comm import BWD, FWD, channel_order, channels  # noqa: E402
from ppsolve.executor.device import CpuDevice, bytes_view, select_device  # noqa: E402

GPT = MODELS / "gpt-tiny.json"


@pytest.mark.parametrize("requested, ranks, available, gpus, expected", [
    ("auto", 2, False, 0, "cpu"),
    ("auto", 2, True, 1, "cpu"),  # fewer GPUs than local ranks
    ("auto", 2, True, 2, "cuda"),
    ("auto", 1, True, 8, "cuda"),
    ("cpu", 2, True, 2, "cpu"),
    ("cuda", 4, True, 4, "cuda"),
])
def test_select_device(requested, ranks, available, gpus, expected):
    assert select_device(requested, ranks, available, gpus) == expected


@pytest.mark.parametrize("requested, available, gpus, message", [
    ("cuda", False, 0, "CUDA is not available"),
    ("cuda", True, 1, "one GPU per local rank: 2 ranks, 1 GPU"),
    ("gpu", True, 2, "must be one of auto, cpu, cuda"),
])
def test_select_device_refusals(requested, available, gpus, message):
    with pytest.raises(InputError, match=message) as info:
        select_device(requested, 2, available, gpus)
    assert info.value.field == "device"


def test_local_ranks_follow_torchrun(monkeypatch):
    from ppsolve.executor.launch import local_rank, local_ranks

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert local_ranks(4) == 4 and local_rank() == 0
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert local_ranks(8) == 4 and local_rank() == 1


def test_cuda_refused_before_any_process(tmp_path, capsys, monkeypatch):
    from ppsolve.cli import main
    import ppsolve.executor.api as api
    import ppsolve.executor.profiler as profiler

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def never(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(api, "launch", never)
    monkeypatch.setattr(profiler, "profile", never)
    prob = problem(2, 2)
    path = tmp_path / "s.json"
    make(prob, pipelined_orders(prob, lag=1), "x").save(path)
    out = tmp_path / "p.json"
    for argv in (["run", str(path), "--model", str(GPT), "--device", "cuda"],
                 ["profile", "--model", str(GPT), "--devices", "2", "--microbatches", "2", "--device", "cuda",
                  "-o", str(out)]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--device" in err[0] and "CUDA is not available" in err[0], err
    assert not out.exists()


def test_cpu_device_moves_a_storage_out_and_back():
    dev = CpuDevice()
    base = torch.arange(12, dtype=torch.float32)
    view = base[3:7]  # a view shares the storage and must stay valid
    storage = base.untyped_storage()
    before = bytes_view(storage).clone()
    host = dev.to_host(storage)
    assert storage.nbytes() == 0 and host.numel() == 48 and host.device.type == "cpu"
    assert torch.equal(host, before)
    dev.to_device(storage, host)
    assert storage.nbytes() == 48
    assert torch.equal(view, torch.arange(3, 7, dtype=torch.float32))
    assert dev.mark() is None and dev.max_allocated() is None
    dev.wait(None)
    with dev.lane("d2h"):
        assert dev.timed(lambda: sum(range(1000))) >= 0
    d2h, h2d = dev.copy_bandwidth(1 << 20, repeats=1)
    assert d2h == h2d > 0


def test_channel_order_follows_the_senders_list():
    prob = problem(2, 3)
    schedule = make(prob, pipelined_orders(prob, lag=1), "1f1b")
    assert channels(schedule) == [(0, 1), (1, 0)]
    assert channel_order(schedule, 0, 1) == [(FWD, 1, j) for j in range(3)]
    assert channel_order(schedule, 1, 0) == [(BWD, 0, j) for j in range(3)]
    inter = problem(2, 3, chunks=2, placement="interleaved")
    schedule = make(inter, pipelined_orders(inter, lag=2), "interleaved")
    # rank 1 holds stages 1 and 3 (placement 0 1 0 1): it sends F(1)'s output to stage 2 and
    # the input gradients of B(1) and B(3) to stages 0 and 2, all to rank 0, in its list order
    message = {("F", 1): (FWD, 2), ("B", 1): (BWD, 0), ("B", 3): (BWD, 2)}
    expected = [message[(op.kind.value, op.stage)] + (op.microbatch,) for op in schedule.ops_of_device(1)
                if (op.kind.value, op.stage) in message]
    assert len(expected) == 9 and channel_order(schedule, 1, 0) == expected
    assert channel_order(schedule, 0, 1) == [(FWD, s + 1, op.microbatch) if op.kind.value == "F" else (BWD, 1, op.microbatch)
                                             for op in schedule.ops_of_device(0)
                                             for s in [op.stage] if (op.kind.value, op.stage) in (("F", 0), ("F", 2), ("B", 2))]


@pytest.mark.parametrize("placement, offload", [("interleaved", False), ("vshape", True)])
@pytest.mark.slow
def test_ordered_channels_deliver_every_message_to_its_op(placement, offload):
    # NCCL's protocol on gloo: untagged messages, one group per direction, receives posted
    # in the sender's order when needed. A message in the wrong buffer breaks the gradients.
    prob = problem(2, 4, chunks=2, placement=placement, offload=offload)
    orders = pipelined_orders(prob, lag=2, w_delay=1)
    if offload:
        orders = add_offload(prob, orders, {(0, 0), (1, 1)})
    outcome = run_schedule_and_compare(make(prob, orders, "ordered"), GPT, comm="ordered", device="cpu")
    for fig in outcome.figures:
        assert fig.measured_peak == fig.predicted_peak and fig.max_allocated is None


def test_render_adds_cuda_column_only_with_cuda_figures():
    from ppsolve.executor.report import RankFigures, render

    cpu = RankFigures(0, 100, 100.0, {"F": 1.0}, 2.0, {"F": 1.0}, 2.0)
    assert "cuda" not in render([cpu])
    gpu = RankFigures(0, 100, 100.0, {"F": 1.0}, 2.0, {"F": 1.0}, 2.0, max_allocated=123456)
    table = render([gpu])
    assert "cuda max alloc (B)" in table.splitlines()[0] and table.splitlines()[1].rstrip().endswith("123456")
