"""Replay a ``compute_comms`` CSV as PyTorch's ``_PipelineScheduleRuntime`` runs it, to show it cannot hang.

The runtime's rules (torch 2.13, ``_step_microbatches``), as modelled here:

- each rank runs its row in order; posting a send or a receive does not block the rank
  (``batch_isend_irecv``); a send needs its producing op done on this rank (it sends
  that op's output);
- a compute op blocks the rank until the receive it consumes has completed
  (F: ``RECV_F`` of its stage and microbatch, I/B: ``RECV_B``); it must have been posted
  earlier in the row (the runtime raises otherwise); an input from a stage on the same
  rank needs that stage's op done earlier in the row; W needs its I;
- the messages two ranks exchange, in both directions, form one FIFO channel: the k-th
  send or receive one rank posts with a peer matches the k-th the peer posts with it
  (gloo matches in order; NCCL serializes a pair's operations on one stream), and it
  completes once both are posted and the (k-1)-th has completed. A mismatch (the k-th
  are not the two ends of one message) is an error: the tensor would go to the wrong
  buffer, or the ranks would hang.

``recv_blocks=True`` is stricter still: a receive also blocks its rank until it
completes (PyTorch's own ``_simulate_comms_compute`` assumes this). ``UNSHARD`` and
``RESHARD`` (FSDP, added by PyTorch's lowering of a compute_only CSV) are no-ops here.

With durations (:func:`replay_times`) the replay is timed: a rank runs its row
back to back, an op starts when the rank is free and its input has arrived, a message
arrives ``latency`` after its send is posted, but not before its receive is posted nor
before the previous message of its channel has arrived (FIFO).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from ppsolve.errors import DeadlockError, InputError

_ACTION = re.compile(r"^(\d+)(F|I|B|W|REDUCE_GRAD|UNSHARD|RESHARD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)$")
_COMMS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B")


@dataclass(frozen=True)
class Action:
    stage: int
    kind: str
    microbatch: int | None

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{'' if self.microbatch is None else self.microbatch}"


def parse_action(text: str, where: str) -> Action:
    match = _ACTION.match(text.strip())
    if not match:
        raise InputError(where, f"not a torch pipelining action: {text!r}")
    stage, kind, mb = match.groups()
    return Action(int(stage), kind, int(mb) if mb else None)


def parse_rows(text: str) -> list[list[Action]]:
    """The CSV text as actions per rank (one row per rank, one action per cell)."""
    return [[parse_action(cell, f"csv row {r} column {c}") for c, cell in enumerate(line.split(","))]
            for r, line in enumerate(text.splitlines()) if line.strip()]


def _peer_stage(a: Action) -> int:
    return a.stage + 1 if a.kind in ("SEND_F", "RECV_B") else a.stage - 1


def _message(a: Action) -> tuple:
    """What a send or receive carries: (direction, sending stage, microbatch)."""
    sender = a.stage if a.kind.startswith("SEND") else _peer_stage(a)
    return (a.kind[-1], sender, a.microbatch)


def replay(rows: list[list[Action]], recv_blocks: bool = False) -> int:
    """Run the rows under the rules above; return the number of rounds it took
    (each round lets every rank go as far as it can). DeadlockError when some rank can
    never go on, naming each stuck rank's action and what it waits for; InputError
    for an action the runtime would refuse."""
    return _run(rows, recv_blocks, lambda rank, a: 0.0, lambda s, t, j: 0.0, lambda rank, a: 0.0)[0]


def replay_times(rows: list[list[Action]], duration: Callable[[int, Action], float],
                 latency: Callable[[int, int, int], float], recv_blocks: bool = False,
                 lead: Callable[[int, Action], float] | None = None) -> list[float]:
    """The timed replay: when each rank ends its row. ``duration(rank, action)`` is how long
    an action keeps its rank busy once its input is there (0 for sends and receives),
    ``lead(rank, action)`` how long before that it works without it (default 0),
    ``latency(s, t, j)`` the time of microbatch j's message from stage s to stage t. Errors as
    :func:`replay`."""
    return _run(rows, recv_blocks, duration, latency, lead or (lambda rank, a: 0.0))[1]


def _run(rows, recv_blocks, duration, latency, lead) -> tuple[int, list[float]]:
    return _Replay(rows, recv_blocks, duration, latency, lead).run()


def _stage_ranks(rows: list[list[Action]]) -> dict[int, int]:
    """The rank of each stage with compute actions; InputError when one has them on two ranks."""
    rank_of: dict[int, int] = {}
    for rank, row in enumerate(rows):
        for a in row:
            if a.kind in ("F", "I", "B", "W") and rank_of.setdefault(a.stage, rank) != rank:
                raise InputError("csv", f"stage {a.stage} has actions on ranks {rank_of[a.stage]} and {rank}")
    return rank_of


class _Replay:
    """One replay of the rows: each rank's position and clock, the messages posted, completed and arrived."""

    def __init__(self, rows, recv_blocks, duration, latency, lead):
        self.rows, self.recv_blocks = rows, recv_blocks
        self.duration, self.latency, self.lead = duration, latency, lead
        self.rank_of = _stage_ranks(rows)
        self.channel_index = _match_channels(rows, self.rank_of)
        self.done: list[set] = [set() for _ in rows]
        self.posted: list[dict] = [{} for _ in rows]  # (kind, stage, mb) -> (((low, high), k), row index)
        self.issued: dict[tuple, set[int]] = {}  # (low, high, k) -> ranks that posted it
        self.completed: dict[tuple[int, int], int] = {}  # (low, high) -> channel ops completed
        self.pc = [0] * len(rows)
        self.clock = [0.0] * len(rows)
        self.at: dict[tuple, list[float]] = {}  # (low, high, k) -> [send posted + latency, receive posted]
        self.arrived: dict[tuple, float] = {}  # (low, high, k) -> when the message arrived

    def complete(self, pair) -> None:
        """Complete the channel's messages that both ends have posted, in order."""
        while len(self.issued.get(pair + ((k := self.completed.get(pair, 0)),), ())) == 2:
            self.arrived[pair + (k,)] = max(self.at[pair + (k,)] + [self.arrived.get(pair + (k - 1,), 0.0)])
            self.completed[pair] = k + 1

    def post(self, rank: int, a: Action) -> None:
        """Post send or receive ``a`` of ``rank`` (the rank does not wait for it)."""
        if a.kind.startswith("SEND"):
            producer = ("F",) if a.kind == "SEND_F" else ("I", "B")
            if not any((k, a.stage, a.microbatch) in self.done[rank] for k in producer):
                raise InputError("csv", f"rank {rank} action {self.pc[rank]} ({a}): sends the output of an op not "
                                        "run before it on this rank")
        key = (a.kind, a.stage, a.microbatch)
        if key in self.posted[rank]:
            raise InputError("csv", f"rank {rank} action {self.pc[rank]} ({a}): posted twice")
        pair_k = self.channel_index[(rank, self.pc[rank])]
        self.posted[rank][key] = (pair_k, self.pc[rank])
        message = pair_k[0] + (pair_k[1],)
        if a.kind.startswith("SEND"):
            self.at.setdefault(message, []).append(
                self.clock[rank] + self.latency(a.stage, _peer_stage(a), a.microbatch))
        else:
            self.at.setdefault(message, []).append(self.clock[rank])
        self.issued.setdefault(message, set()).add(rank)
        self.complete(pair_k[0])

    def is_complete(self, pair_k) -> bool:
        pair, k = pair_k
        return self.completed.get(pair, 0) > k

    def arrival(self, pair_k) -> float:
        pair, k = pair_k
        return self.arrived[pair + (k,)]

    def start(self, rank: int, a: Action) -> float:
        """When the part of ``a`` (which can run) that needs its input starts: the rank is free, has
        done the lead, and what it waits for has arrived."""
        if a.kind in _COMMS:
            if self.recv_blocks and a.kind.startswith("RECV"):
                return max(self.clock[rank], self.arrival(self.channel_index[(rank, self.pc[rank])]))
            return self.clock[rank]
        ready = self.clock[rank] + self.lead(rank, a)
        if a.kind in ("F", "I", "B"):
            recv = ("RECV_F" if a.kind == "F" else "RECV_B", a.stage, a.microbatch)
            source = a.stage - 1 if a.kind == "F" else a.stage + 1
            if recv in self.posted[rank] and self.rank_of.get(source, rank) != rank:
                return max(ready, self.arrival(self.posted[rank][recv][0]))
        return ready

    def blocker(self, rank: int, a: Action):
        """None when action ``a`` can run now, else what it waits for (InputError if never)."""
        here = f"rank {rank} action {self.pc[rank]} ({a})"
        if a.kind in _COMMS:
            if self.recv_blocks and a.kind.startswith("RECV") \
                    and not self.is_complete(self.channel_index[(rank, self.pc[rank])]):
                return f"its sender (rank {self.rank_of[_peer_stage(a)]})"
            return None
        if a.kind in ("REDUCE_GRAD", "UNSHARD", "RESHARD"):
            return None
        done = self.done[rank]
        if a.kind == "W":
            if ("I", a.stage, a.microbatch) not in done:
                raise InputError("csv", f"{here}: W before its I on this rank")
            return None
        forward = a.kind == "F"
        if not forward and ("F", a.stage, a.microbatch) not in done:
            raise InputError("csv", f"{here}: backward before its forward on this rank")
        source = a.stage - 1 if forward else a.stage + 1
        if source < 0 or source not in self.rank_of:
            return None
        if self.rank_of[source] == rank:
            kinds = ("F",) if forward else ("I", "B")
            if not any((k, source, a.microbatch) in done for k in kinds):
                raise InputError("csv", f"{here}: its input from stage {source} (same rank) is not computed before it")
            return None
        need = Action(a.stage, "RECV_F" if forward else "RECV_B", a.microbatch)
        recv = (need.kind, need.stage, need.microbatch)
        if recv not in self.posted[rank]:
            raise InputError("csv", f"{here}: consumes {need}, not posted before it on this rank")
        return None if self.is_complete(self.posted[rank][recv][0]) else f"{need} from rank {self.rank_of[source]}"

    def advance(self, rank: int) -> bool:
        """Run ``rank``'s row as far as it can go now; whether it moved."""
        row, progress = self.rows[rank], False
        while self.pc[rank] < len(row):
            a = row[self.pc[rank]]
            key = (a.kind, a.stage, a.microbatch)
            if a.kind in _COMMS and self.posted[rank].get(key, (None, None))[1] != self.pc[rank]:
                self.post(rank, a)
                progress = True
            if self.blocker(rank, a) is not None:
                break
            self.clock[rank] = self.start(rank, a) + self.duration(rank, a)
            self.done[rank].add(key)
            self.pc[rank] += 1
            progress = True
        return progress

    def run(self) -> tuple[int, list[float]]:
        """(rounds, when each rank ends its row); DeadlockError naming what each stuck rank waits for."""
        rows, pc, rounds = self.rows, self.pc, 0
        while any(pc[r] < len(row) for r, row in enumerate(rows)):
            rounds += 1
            if not any([self.advance(rank) for rank in range(len(rows))]):
                stuck = [f"rank {r} at action {pc[r]} ({row[pc[r]]}) waits for {self.blocker(r, row[pc[r]])}"
                         for r, row in enumerate(rows) if pc[r] < len(row)]
                raise DeadlockError("the schedule hangs: " + "; ".join(stuck))
        return rounds, self.clock


def _match_channels(rows: list[list[Action]], rank_of: dict[int, int]) -> dict[tuple[int, int], tuple]:
    """For each send or receive (rank, index): ((low rank, high rank), k), its place in its channel;
    InputError when the two ranks' k-th actions on a channel are not the ends of one message."""
    sequences: dict[tuple[int, int], list[tuple[int, int, Action]]] = {}
    count: dict[tuple[int, int], int] = {}  # (rank, peer): its actions on the channel so far
    out = {}
    for rank, row in enumerate(rows):
        for i, a in enumerate(row):
            if a.kind not in _COMMS:
                continue
            peer = rank_of.get(_peer_stage(a))
            if peer is None or peer == rank:
                raise InputError("csv", f"rank {rank} action {i} ({a}): no stage {_peer_stage(a)} on another rank")
            pair = (min(rank, peer), max(rank, peer))
            out[(rank, i)] = (pair, count.get((rank, peer), 0))
            count[(rank, peer)] = count.get((rank, peer), 0) + 1
            sequences.setdefault(pair, []).append((rank, i, a))
    for (low, high), seq in sequences.items():
        ends = {r: [a for rank, _, a in seq if rank == r] for r in (low, high)}
        for k, (x, y) in enumerate(zip(ends[low], ends[high])):
            if _message(x) != _message(y) or x.kind[:4] == y.kind[:4]:
                raise InputError("csv", f"ranks {low} and {high}: their message {k} is {x} on rank {low} but {y} "
                                        f"on rank {high} (each pair of ranks must post its sends and receives "
                                        "in one order)")
        if len(ends[low]) != len(ends[high]):
            raise InputError("csv", f"ranks {low} and {high}: {len(ends[low])} sends and receives on rank {low}, "
                                    f"{len(ends[high])} on rank {high}")
    return out
