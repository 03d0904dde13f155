"""The actions of PyTorch pipelining's ``compute_comms`` CSV, with the sends and receives placed by ppsolve.

Per rank: its compute ops (F, B, W) in the order it issues them (planned start,
:func:`ppsolve.simulator.issue_order`), written as torch actions (``<stage>F<mb>``,
``I`` for a split B, ``B`` for a fused B, ``W``); R, OFFLOAD and RELOAD are not
torch actions and go to the side file (:mod:`ppsolve.export.torch_levers`).

A message is a data dependency (:func:`ppsolve.dependencies.dependents_table`)
between compute ops of two ranks: F(s,j) -> F(s+1,j) (``SEND_F``/``RECV_F``) and
B(s+1,j) -> B(s,j) (``SEND_B``/``RECV_B``). Placement:

- each send comes right after the op that produces it;
- the messages two ranks exchange (both directions) are put in one *channel order*:
  by the planned end of the producing op, then its dependency depth
  (:func:`ppsolve.dependencies.depth`: a zero-length F ends at the same instant as the F it
  consumes, and comes after it), then sending rank, then its issue position;
  each rank posts its sends and receives with that peer in this order, which is what a
  FIFO channel per pair needs (gloo matches receives to sends in order; NCCL runs one
  stream per pair, so a send queued before the matching receive would hang);
- each receive comes just before the op that consumes it, or earlier where the channel
  order needs it: before this rank's next receive with the same peer, and before the op
  whose send to that peer comes next;
- ``<stage>REDUCE_GRAD`` (gradient scaling, FSDP's post-backward) after the stage's last
  backward and its send, as PyTorch's own lowering places it.

Why it cannot hang under the runtime's rules (:mod:`ppsolve.export.torch_replay`, which
replays every file before it is written): each rank's row keeps each channel in channel
order (a receive goes before this rank's ops for later messages; a send of an earlier
message ends before the consumer of a later one starts). Suppose some ranks are stuck, and
let ``c`` be the blocked compute op that starts first in the plan (planned start, then issue
order), on rank ``r``, waiting for message ``m_r`` from rank ``p``. The earliest unfinished
message ``m`` of their channel (``m`` no later than ``m_r``) was not posted by one side, not
by ``r`` (it posted ``m_r``, so everything before). If the sender of ``m`` has not posted it,
the sender is blocked before ``m``'s producer, which ends no later than ``m_r``'s producer,
which ends before ``c`` starts. Otherwise ``p`` receives ``m``, so ``m`` is not ``m_r`` and
``p``'s receive of ``m`` comes before its send of ``m_r``: ``p`` is blocked before ``m_r``'s
producer. Either way a rank is blocked at an op that starts before ``c``, against the choice
of ``c``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ppsolve.dependencies import dependents_table, depth
from ppsolve.ops import OpKind
from ppsolve.schedule import Schedule, ScheduledOp
from ppsolve.simulator import issue_order

_COMM = {OpKind.F: ("SEND_F", "RECV_F"), OpKind.B: ("SEND_B", "RECV_B")}


def torch_action(kind: OpKind, stage: int, microbatch: int, split: bool) -> str:
    """A compute op as a torch action string: ``2F0``, ``2I0`` (split B), ``2B0`` (fused B), ``2W0``."""
    letter = {OpKind.F: "F", OpKind.B: "I" if split else "B", OpKind.W: "W"}[kind]
    return f"{stage}{letter}{microbatch}"


@dataclass(frozen=True)
class Message:
    """One tensor between two ranks: sent after ``producer``, needed by ``consumer``."""

    producer: ScheduledOp
    consumer: ScheduledOp
    order: tuple  # the channel-order key

    @property
    def send(self) -> str:
        return f"{self.producer.stage}{_COMM[self.producer.kind][0]}{self.producer.microbatch}"

    @property
    def recv(self) -> str:
        return f"{self.consumer.stage}{_COMM[self.consumer.kind][1]}{self.consumer.microbatch}"


def compute_order(schedule: Schedule, device: int) -> list[ScheduledOp]:
    """The device's compute ops that are torch actions (F, B, W), in issue order."""
    issued = issue_order(schedule.problem, schedule.ops_of_device(device))
    return [op for op in issued if op.kind in (OpKind.F, OpKind.B, OpKind.W)]


def messages(schedule: Schedule, orders: list[list[ScheduledOp]]) -> list[Message]:
    """Every cross-rank data dependency between F ops or between B ops, in one global order."""
    problem = schedule.problem
    place = problem.placement
    waiting = dependents_table(problem, kinds=(OpKind.F, OpKind.B))
    index = {(op.kind, op.stage, op.microbatch): (op, i) for order in orders for i, op in enumerate(order)}
    out = []
    for order in orders:
        for i, op in enumerate(order):
            for kind, stage, _lag in waiting.get((op.kind, op.stage), ()):
                if kind is op.kind and place[stage] != place[op.stage]:
                    consumer, _ = index[(kind, stage, op.microbatch)]
                    out.append(Message(op, consumer, (op.end, depth(problem, op.kind, op.stage), op.device, i)))
    return sorted(out, key=lambda m: m.order)


def compute_comms_rows(schedule: Schedule) -> list[list[str]]:
    """Per rank, the compute_comms actions (see the module docstring)."""
    problem = schedule.problem
    split = problem.split_backward
    orders = [compute_order(schedule, d) for d in range(problem.devices)]
    msgs = messages(schedule, orders)
    position = [{(op.kind, op.stage, op.microbatch): i for i, op in enumerate(order)} for order in orders]
    sent = {(m.producer.device, m.producer.kind, m.producer.stage, m.producer.microbatch): m for m in msgs}
    recvs: list[dict[int, list[Message]]] = [{} for _ in orders]  # rank -> compute index -> receives before it
    for rank in range(problem.devices):
        channels: dict[int, list[Message]] = {}
        for m in msgs:
            if rank in (m.producer.device, m.consumer.device):
                peer = m.consumer.device if m.producer.device == rank else m.producer.device
                channels.setdefault(peer, []).append(m)
        for channel in channels.values():
            limit = len(orders[rank])  # before which compute op the next channel action must go
            for m in reversed(channel):
                if m.producer.device == rank:  # our send, right after its producer: receive before that op
                    limit = min(limit, position[rank][(m.producer.kind, m.producer.stage, m.producer.microbatch)])
                else:
                    at = min(limit, position[rank][(m.consumer.kind, m.consumer.stage, m.consumer.microbatch)])
                    recvs[rank].setdefault(at, []).append(m)
                    limit = at
    rows = []
    last_backward = _last_backwards(orders, split)
    for rank, order in enumerate(orders):
        row: list[str] = []
        for i, op in enumerate(order):
            row += [m.recv for m in sorted(recvs[rank].get(i, ()), key=lambda m: m.order)]
            row.append(torch_action(op.kind, op.stage, op.microbatch, split))
            message = sent.get((rank, op.kind, op.stage, op.microbatch))
            if message is not None:
                row.append(message.send)
            if (rank, i) in last_backward:
                row.append(f"{op.stage}REDUCE_GRAD")
        rows.append(row)
    return rows


def _last_backwards(orders: list[list[ScheduledOp]], split: bool) -> set[tuple[int, int]]:
    """(rank, index) of each stage's last W (split) or B (fused)."""
    kind = OpKind.W if split else OpKind.B
    last: dict[int, tuple[int, int]] = {}
    for rank, order in enumerate(orders):
        for i, op in enumerate(order):
            if op.kind is kind:
                last[op.stage] = (rank, i)
    return set(last.values())
