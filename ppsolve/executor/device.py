"""Where a rank runs: CPU with gloo, or one CUDA device with NCCL.

``select_device`` picks the kind before any process starts; each rank then builds
its ``Device``: ``CpuDevice`` (what the executor always did: synchronous copies into
separate host buffers, wall-clock times) or ``CudaDevice`` (``cuda:LOCAL_RANK``, side
streams for the two host lanes, events, pinned host buffers). Everything else in the
executor is the same code on both.

The small vocabulary the runtime uses:
- ``lane(name)``: run what follows on the compute stream or on the ``d2h`` / ``h2d``
  lane (CUDA: a side stream each; CPU: nothing changes);
- ``mark()``: an event after the work issued so far on the current stream, ``wait(event)``:
  the current stream waits for it without blocking the host (CPU: ``None``, no-op);
- ``to_host(storage)`` / ``to_device(storage, host)``: move one saved storage out and
  back (freed to zero bytes and reallocated in place, so every tensor on it stays valid);
- ``stamp()`` / ``seconds(stamp)``: a point in time on the current stream (CUDA: a timing
  event, read after ``synchronize``); ``timed(fn)``: milliseconds of ``fn`` on the device;
- ``rng_state()`` / ``replay_rng(state)``: the random state a recomputed forward started
  from, and a block run from it (R draws what F drew; the generators are restored after).
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from statistics import median

import torch

from ppsolve.errors import InputError

DEVICE_CHOICES = ("auto", "cpu", "cuda")
MIB = float(2**20)


def select_device(requested: str, local_ranks: int, cuda_available: bool | None = None,
                  gpu_count: int | None = None) -> str:
    """``"cpu"`` or ``"cuda"`` for ``local_ranks`` processes on this machine.

    auto: CUDA when it is available with one GPU per local rank, else CPU. ``cuda`` without
    CUDA, or with fewer GPUs than local ranks (NCCL needs one GPU per rank), is refused."""
    if requested not in DEVICE_CHOICES:
        raise InputError("device", f"must be one of {', '.join(DEVICE_CHOICES)}, got {requested!r}")
    if requested == "cpu":
        return "cpu"
    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    if gpu_count is None:
        gpu_count = torch.cuda.device_count() if cuda_available else 0
    enough = cuda_available and gpu_count >= local_ranks
    if requested == "auto":
        return "cuda" if enough else "cpu"
    if not cuda_available:
        raise InputError("device", "cuda was requested but CUDA is not available here "
                                   "(torch.cuda.is_available() is False); use `device` cpu or auto")
    if not enough:
        raise InputError("device", f"cuda needs one GPU per local rank: {local_ranks} ranks, {gpu_count} GPU(s)")
    return "cuda"


def make_device(kind: str, local_rank: int = 0) -> "Device":
    return CudaDevice(local_rank) if kind == "cuda" else CpuDevice()


def bytes_view(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over the whole storage."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


class CpuDevice:
    """CPU with gloo: synchronous copies, wall-clock times, nothing to order."""

    kind = "cpu"
    backend = "gloo"

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self.t0 = 0.0

    def init_options(self) -> dict:
        """Extra keyword arguments of ``init_process_group``."""
        return {}

    def place(self, value):
        """A module or tensor on this device (no copy on CPU)."""
        return value.to(self.device)

    # ----- ordering -----
    def lane(self, name: str):
        return nullcontext()

    def mark(self):
        return None

    def wait(self, event) -> None:
        pass

    def synchronize(self) -> None:
        pass

    # ----- transfers -----
    def host_buffer(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, device="cpu")

    def to_host(self, storage: torch.UntypedStorage) -> torch.Tensor:
        """Copy ``storage`` into a new host buffer on the current lane and free it."""
        view = bytes_view(storage)
        host = self.host_buffer(view.numel())
        host.copy_(view, non_blocking=True)
        self._used_by_lane(view)
        storage.resize_(0)
        return host

    def to_device(self, storage: torch.UntypedStorage, host: torch.Tensor) -> None:
        """Reallocate ``storage`` and copy ``host`` back into it on the current lane."""
        storage.resize_(host.numel())
        view = bytes_view(storage)
        view.copy_(host, non_blocking=True)
        self._used_by_compute(view)

    def _used_by_lane(self, view: torch.Tensor) -> None:
        pass

    def _used_by_compute(self, view: torch.Tensor) -> None:
        pass

    # ----- randomness (recompute) -----
    def rng_state(self):
        """The state of the generators the stage's forward draws from (the CPU one here)."""
        return torch.get_rng_state()

    @contextmanager
    def replay_rng(self, state):
        """Run the block from ``state``; the generators are as before afterwards."""
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(state)
            yield

    # ----- time and memory -----
    def begin(self) -> None:
        """Start of a measured walk: times are seconds from here."""
        self.t0 = time.perf_counter()

    def stamp(self):
        return time.perf_counter() - self.t0

    def seconds(self, stamp) -> float:
        return stamp

    def timed(self, fn) -> float:
        """Milliseconds ``fn`` takes (on CUDA: its work on the device, between two events)."""
        before = self.stamp()
        fn()
        after = self.stamp()
        self.synchronize()
        return (self.seconds(after) - self.seconds(before)) * 1e3

    def max_allocated(self) -> int | None:
        return None

    def copy_bandwidth(self, nbytes: int, repeats: int = 5) -> tuple[float, float]:
        """(d2h, h2d) MiB per ms of copying ``nbytes`` into a separate host buffer and back;
        one copy between two host buffers on CPU, so both are the same."""
        nbytes = max(nbytes, 1 << 20)
        src, dst = torch.empty(nbytes, dtype=torch.uint8).fill_(1), torch.empty(nbytes, dtype=torch.uint8)
        dst.copy_(src)
        ms = median(self.timed(lambda: dst.copy_(src)) for _ in range(repeats))
        bw = nbytes / MIB / max(ms, 1e-6)
        return bw, bw


Device = CpuDevice  # the interface the executor uses; CudaDevice overrides what differs


class CudaDevice(CpuDevice):
    """``cuda:index`` with NCCL. Compute runs on the current stream; each host lane (d2h,
    h2d) is a side stream. Host buffers are pinned. TF32 is off, so fp32 results stay
    comparable with the reference at 1e-5. Not yet run on a GPU (see docs/executor.md)."""

    kind = "cuda"
    backend = "nccl"

    def __init__(self, index: int) -> None:
        self.device = torch.device("cuda", index)
        torch.cuda.set_device(self.device)
        disable_tf32()
        self.streams = {"compute": torch.cuda.current_stream(self.device),
                        "d2h": torch.cuda.Stream(self.device), "h2d": torch.cuda.Stream(self.device)}
        self.t0 = self._event()

    def init_options(self) -> dict:
        return {"device_id": self.device}

    def lane(self, name: str):
        return torch.cuda.stream(self.streams[name])

    def mark(self):
        return self._event(timing=False)

    def wait(self, event) -> None:
        if event is not None:
            torch.cuda.current_stream(self.device).wait_event(event)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def host_buffer(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def _used_by_lane(self, view: torch.Tensor) -> None:
        # freed right after this call: the allocator reuses the block only once the lane's copy is done
        view.record_stream(torch.cuda.current_stream(self.device))

    def _used_by_compute(self, view: torch.Tensor) -> None:
        # allocated on the lane, used and later freed by compute work
        view.record_stream(self.streams["compute"])

    def rng_state(self):
        return torch.get_rng_state(), torch.cuda.get_rng_state(self.device)

    @contextmanager
    def replay_rng(self, state):
        cpu, cuda = state
        with torch.random.fork_rng(devices=[self.device.index], device_type="cuda"):
            torch.set_rng_state(cpu)
            torch.cuda.set_rng_state(cuda, self.device)
            yield

    def begin(self) -> None:
        self.synchronize()
        torch.cuda.reset_peak_memory_stats(self.device)
        self.t0 = self._event()

    def stamp(self):
        return self._event()

    def seconds(self, stamp) -> float:
        return self.t0.elapsed_time(stamp) / 1e3

    def max_allocated(self) -> int | None:
        return int(torch.cuda.max_memory_allocated(self.device))

    def copy_bandwidth(self, nbytes: int, repeats: int = 5) -> tuple[float, float]:
        """(d2h, h2d) MiB per ms between device memory and a pinned host buffer, on the lanes."""
        nbytes = max(nbytes, 1 << 20)
        src = torch.ones(nbytes, dtype=torch.uint8, device=self.device)
        host = self.host_buffer(nbytes)
        self.synchronize()  # the lanes do not wait for the compute stream that filled ``src``
        rates = []
        for name, copy in (("d2h", lambda: host.copy_(src, non_blocking=True)),
                           ("h2d", lambda: src.copy_(host, non_blocking=True))):
            with self.lane(name):
                copy()
                ms = median(self.timed(copy) for _ in range(repeats))
            rates.append(nbytes / MIB / max(ms, 1e-6))
        return rates[0], rates[1]

    def _event(self, timing: bool = True):
        event = torch.cuda.Event(enable_timing=timing)
        event.record(torch.cuda.current_stream(self.device))
        return event


def disable_tf32() -> None:
    """fp32 matmuls and convolutions in full precision (the 1e-5 gradient check stays meaningful)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
