"""The one op type shared by baselines, solvers, simulator, checker and executor."""

from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple


class OpKind(str, Enum):
    """What an op does: compute (F, B, W, and R, a recompute) or a host-link transfer."""

    F = "F"
    B = "B"
    W = "W"
    R = "R"
    OFFLOAD = "OFFLOAD"
    RELOAD = "RELOAD"

    @property
    def is_compute(self) -> bool:
        return self in COMPUTE_KINDS

    @property
    def is_transfer(self) -> bool:
        return not self.is_compute

    def __str__(self) -> str:
        return self.value


COMPUTE_KINDS = frozenset({OpKind.F, OpKind.B, OpKind.W, OpKind.R})
TRANSFER_KINDS = frozenset({OpKind.OFFLOAD, OpKind.RELOAD})
# The one integer code of each kind, for arrays indexed by kind: F B W R OFFLOAD RELOAD = 0..5, so the
# compute kinds are the codes below OFFLOAD's.
KIND_CODE: dict[OpKind, int] = {kind: code for code, kind in enumerate(OpKind)}

_OP_TEXT = re.compile(r"^(F|B|W|R|OFFLOAD|RELOAD)\((\d+),(\d+)\)$")


class Op(NamedTuple):
    """One operation of one (stage, microbatch); its string form is ``F(3,1)``."""

    kind: OpKind
    stage: int
    microbatch: int

    def __str__(self) -> str:
        return f"{self.kind.value}({self.stage},{self.microbatch})"

    @classmethod
    def parse(cls, text: str) -> "Op":
        """Inverse of ``str``: ``Op.parse("B(2,0)") == Op(OpKind.B, 2, 0)``."""
        match = _OP_TEXT.match(text.replace(" ", ""))
        if not match:
            raise ValueError(f"not an op: {text!r} (expected e.g. 'F(3,1)')")
        return cls(OpKind(match.group(1)), int(match.group(2)), int(match.group(3)))


def F(stage: int, microbatch: int) -> Op:
    return Op(OpKind.F, stage, microbatch)


def B(stage: int, microbatch: int) -> Op:
    return Op(OpKind.B, stage, microbatch)


def W(stage: int, microbatch: int) -> Op:
    return Op(OpKind.W, stage, microbatch)


def R(stage: int, microbatch: int) -> Op:
    return Op(OpKind.R, stage, microbatch)


def OFFLOAD(stage: int, microbatch: int) -> Op:
    return Op(OpKind.OFFLOAD, stage, microbatch)


def RELOAD(stage: int, microbatch: int) -> Op:
    return Op(OpKind.RELOAD, stage, microbatch)
