"""Point-to-point messages between the stages of different ranks.

A message is a stage's output (direction FWD, into stage s) or an input gradient
(direction BWD, into stage s) of one microbatch; the sender issues it right after the
op that made it, in the order of its action list. Two ways to deliver them:

``TaggedComm`` (gloo, CPU): every receive is posted up front with a tag naming
(direction, stage, microbatch); gloo matches by tag, so no order of the lists can
block on a receive that was not posted.

``OrderedComm`` (NCCL, CUDA; also runs on gloo, which the tests use): NCCL ignores
tags, matches the k-th send with the k-th receive between two ranks, and runs the
operations of one communicator one after another on one stream, where a send waits
until its receive runs on the peer. Posting every receive up front would queue a
rank's receives in front of its own sends on that stream: rank 0's first F output
would wait behind the receives of gradients that rank 1 can only make after getting
it, a deadlock. So:

1. Each ordered pair of ranks that exchange messages (a *channel*, src -> dst) gets
   its own process group, hence its own communicator and stream, carrying only
   src -> dst messages: a send can only wait for receives of its own channel.
2. On a channel, src sends in the order of its action list; dst, which holds the
   same schedule, computes that order (``channel_order``) and posts its receives from
   src in exactly that order, so the k-th receive is the k-th message's buffer.
3. Receives are posted when needed: waiting for message k posts the receives of the
   channel up to k (earlier messages are kept until their op). Hosts block only there
   (``wait`` with a timeout blocks the host on NCCL). A rank waiting at op X for
   message k waits for src to reach the op P that made it, and the messages before
   k come from ops before P. The lists are in planned-start order and X starts
   after P ends, so if src is itself blocked, it is at an op that starts before X:
   a chain of waits goes strictly back in planned time and cannot close into a
   cycle (the argument the tagged receives rely on too). Sends never block the host,
   and each one's receive is posted at the latest when dst reaches its consumer.
4. A first send or receive on a NCCL communicator blocks until both ranks create it,
   so every channel exchanges one warm-up message before the walk, channel by channel
   in one global order that every rank follows: the first unfinished channel in that
   order always has both of its ranks at it.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from ppsolve.ops import OpKind
from ppsolve.simulator import issue_order

FWD, BWD = 0, 1  # directions: activation into stage s, gradient into stage s
Key = tuple[int, int, int]  # (direction, stage, microbatch)


def outgoing(op, num_stages: int, placement) -> tuple[Key, int] | None:
    """The message compute op ``op`` sends to another rank, and that rank (None if none)."""
    s, j, src = op.stage, op.microbatch, placement[op.stage]
    if op.kind is OpKind.F and s < num_stages - 1 and placement[s + 1] != src:
        return (FWD, s + 1, j), placement[s + 1]
    if op.kind is OpKind.B and s > 0 and placement[s - 1] != src:
        return (BWD, s - 1, j), placement[s - 1]
    return None


def channel_order(schedule, src: int, dst: int) -> list[Key]:
    """The messages ``src`` sends to ``dst``, in the order it sends them."""
    problem = schedule.problem
    out = []
    for op in issue_order(problem, schedule.ops_of_device(src)):  # the order src walks its list
        message = outgoing(op, problem.num_stages, problem.placement)
        if message is not None and message[1] == dst:
            out.append(message[0])
    return out


def channels(schedule) -> list[tuple[int, int]]:
    """Every (src, dst) pair of ranks with at least one message, in one global order."""
    problem = schedule.problem
    found = {(problem.placement[s], problem.placement[t]) for s in range(problem.num_stages)
             for t in (s - 1, s + 1) if 0 <= t < problem.num_stages}
    return sorted((a, b) for a, b in found if a != b)


class TaggedComm:
    """Tagged asynchronous messages, every receive posted up front (gloo)."""

    def __init__(self, schedule, rank: int, stages, shapes: list[tuple[int, ...]], timeout_s: float):
        problem = schedule.problem
        self.num_stages, self.microbatches = problem.num_stages, problem.microbatches
        self.timeout = timedelta(seconds=timeout_s)
        self.recvs: dict[Key, tuple[torch.Tensor, object]] = {}
        self.sends: list[object] = []
        place = problem.placement
        for s in stages:
            for j in range(self.microbatches):
                if s > 0 and place[s - 1] != rank:
                    self.post_recv(FWD, s, j, place[s - 1], shapes[j])
                if s < self.num_stages - 1 and place[s + 1] != rank:
                    self.post_recv(BWD, s, j, place[s + 1], shapes[j])

    def tag(self, direction: int, stage: int, j: int) -> int:
        return (direction * self.num_stages + stage) * self.microbatches + j

    def post_recv(self, direction: int, stage: int, j: int, src: int, shape: tuple[int, ...]) -> None:
        buf = torch.empty(shape)
        self.recvs[(direction, stage, j)] = (buf, dist.irecv(buf, src=src, tag=self.tag(direction, stage, j)))

    def wait_recv(self, direction: int, stage: int, j: int) -> torch.Tensor:
        buf, work = self.recvs.pop((direction, stage, j))
        work.wait(self.timeout)
        return buf

    def send(self, direction: int, stage: int, j: int, tensor: torch.Tensor, dst: int) -> None:
        self.sends.append(dist.isend(tensor.contiguous(), dst=dst, tag=self.tag(direction, stage, j)))

    def finish(self) -> None:
        for work in self.sends:
            work.wait(self.timeout)
        self.sends.clear()


class Channels:
    """One process group per channel, created and warmed up by every rank (collective)."""

    def __init__(self, schedule, rank: int, device, timeout_s: float):
        self.rank = rank
        self.order = {pair: channel_order(schedule, *pair) for pair in channels(schedule)}
        self.groups = {pair: dist.new_group(sorted(pair)) for pair in self.order}  # same order on every rank
        timeout = timedelta(seconds=timeout_s)
        for (src, dst), group in self.groups.items():
            if rank in (src, dst):
                token = torch.zeros(1, device=device)
                work = (dist.isend(token, dst=dst, group=group) if rank == src
                        else dist.irecv(token, src=src, group=group))
                work.wait(timeout)


class OrderedComm:
    """Messages in channel order, receives posted when needed (NCCL; see the module docstring)."""

    def __init__(self, channels: Channels, placement, shapes: list[tuple[int, ...]], device, timeout_s: float):
        self.channels, self.placement, self.shapes, self.device = channels, placement, shapes, device
        self.timeout = timedelta(seconds=timeout_s)
        self.next = {pair: 0 for pair in channels.order}  # receives posted so far per incoming channel
        self.recvs: dict[Key, tuple[torch.Tensor, object]] = {}
        self.sends: list[object] = []

    def wait_recv(self, direction: int, stage: int, j: int) -> torch.Tensor:
        key = (direction, stage, j)
        src = self.placement[stage - 1 if direction == FWD else stage + 1]
        pair = (src, self.channels.rank)
        order, group = self.channels.order[pair], self.channels.groups[pair]
        while key not in self.recvs:
            if self.next[pair] == len(order):
                raise RuntimeError(f"no message {key} on the channel from rank {src}")
            posted = order[self.next[pair]]
            self.next[pair] += 1
            buf = torch.empty(self.shapes[posted[2]], device=self.device)
            self.recvs[posted] = (buf, dist.irecv(buf, src=src, group=group))
        buf, work = self.recvs.pop(key)
        work.wait(self.timeout)
        return buf

    def send(self, direction: int, stage: int, j: int, tensor: torch.Tensor, dst: int) -> None:
        group = self.channels.groups[(self.channels.rank, dst)]
        self.sends.append(dist.isend(tensor.contiguous(), dst=dst, group=group))

    def finish(self) -> None:
        for work in self.sends:
            work.wait(self.timeout)
        self.sends.clear()
        if self.recvs:
            raise RuntimeError(f"messages received but never used: {sorted(self.recvs)}")
