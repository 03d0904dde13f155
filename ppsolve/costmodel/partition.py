"""Which transformer blocks each stage holds.

The embedding always joins the first stage and the LM head the last (in stage
order, whatever the placement). A partition is the number of blocks of every
stage; a problem file records it as ``"x-partition": {"layers": [...]}``, and the
executor builds its stages from it (an even split when the file has none).

Text forms: ``even``; a comma list of block counts (``3,5,5,3``); or a layout in
the spirit of Megatron's, stages separated by ``|``, each a list of ``E`` (the
embedding), ``t`` or ``t*k`` (blocks) and ``L`` (the head): ``Et*3|t*5|t*5|t*3L``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ppsolve.errors import InputError

ANNOTATION = "x-partition"
_TOKEN = re.compile(r"E|L|t(?:\*(\d+))?")


@dataclass(frozen=True)
class Partition:
    """Blocks per stage, in stage order."""

    layers: tuple[int, ...]

    @property
    def num_stages(self) -> int:
        return len(self.layers)

    @property
    def total(self) -> int:
        return sum(self.layers)

    def blocks(self) -> list[range]:
        """The block indices of every stage."""
        out, start = [], 0
        for count in self.layers:
            out.append(range(start, start + count))
            start += count
        return out

    @property
    def layout(self) -> str:
        """The Megatron-style layout string (``Et*3|t*5|...|t*3L``)."""
        last = len(self.layers) - 1
        return "|".join(("E" if s == 0 else "") + (f"t*{n}" if n else "") + ("L" if s == last else "")
                        for s, n in enumerate(self.layers))

    def annotation(self) -> dict:
        return {"layers": list(self.layers), "layout": self.layout}

    def __str__(self) -> str:
        return ",".join(map(str, self.layers))


def even_partition(layers: int, stages: int, where: str = "partition") -> Partition:
    """Blocks spread as evenly as possible; the extra ones go to the middle stages."""
    if layers < stages:
        raise InputError(where, f"{layers} layers cannot be cut into {stages} stages (need >= 1 per stage)")
    base, extra = divmod(layers, stages)
    first = (stages - extra) // 2
    return Partition(tuple(base + (1 if first <= s < first + extra else 0) for s in range(stages)))


def checked(partition: Partition, layers: int, stages: int, where: str) -> Partition:
    """``partition`` if it has ``stages`` stages holding ``layers`` blocks, each stage something."""
    if partition.num_stages != stages:
        raise InputError(where, f"must have {stages} stages (devices x chunks), got {partition.num_stages}")
    if partition.total != layers:
        raise InputError(where, f"must hold the model's {layers} layers, got {partition.total}")
    for s, count in enumerate(partition.layers):
        if count < 0:
            raise InputError(f"{where}[{s}]", f"must be >= 0, got {count}")
        if count == 0 and 0 < s < stages - 1:
            raise InputError(f"{where}[{s}]", "a middle stage must hold at least one layer")
    if stages == 1 and partition.total == 0:
        raise InputError(where, "the only stage holds no layer")
    return partition


def parse_partition(text: str, layers: int, stages: int, where: str = "partition") -> Partition:
    """``even``, ``3,5,5,3`` or ``Et*3|t*5|t*5|t*3L`` as a Partition checked against the model."""
    text = text.strip()
    if text == "even":
        return even_partition(layers, stages, where)
    if re.fullmatch(r"\d+(\s*,\s*\d+)*", text):
        return checked(Partition(tuple(int(x) for x in text.split(","))), layers, stages, where)
    counts = []
    parts = text.split("|")
    for s, part in enumerate(parts):
        pos, count = 0, 0
        for match in _TOKEN.finditer(part.replace(",", "").replace(" ", "")):
            if match.start() != pos:
                break
            pos = match.end()
            token = match.group(0)
            if token == "E" and s != 0:
                raise InputError(where, f"the embedding E must be on the first stage, found in stage {s}")
            if token == "L" and s != len(parts) - 1:
                raise InputError(where, f"the head L must be on the last stage, found in stage {s}")
            if token.startswith("t"):
                count += int(match.group(1) or 1)
        if pos != len(part.replace(",", "").replace(" ", "")):
            raise InputError(where, f"cannot read stage {s} {part!r}: expected E, t, t*k or L "
                                    "(or 'even', or a comma list of layer counts)")
        counts.append(count)
    return checked(Partition(tuple(counts)), layers, stages, where)


def recorded_partition(annotations: dict[str, Any], layers: int, stages: int,
                       where: str = "problem.x-partition") -> Partition | None:
    """The partition a problem file records (None when it records none), checked against the model."""
    raw = annotations.get(ANNOTATION)
    if raw is None:
        return None
    counts = raw.get("layers") if isinstance(raw, dict) else None
    if not isinstance(counts, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in counts):
        raise InputError(f"{where}.layers", "must be a list of layer counts, one per stage")
    return checked(Partition(tuple(counts)), layers, stages, f"{where}.layers")


def scale_partition(partition: Partition, layers: int, where: str = "shrink.layers") -> Partition:
    """``partition`` cut down (or up) to ``layers`` blocks in the same proportions: each stage's share by
    largest remainder, a stage that held blocks keeps at least one (for a shrunk model's CPU check)."""
    least = [1 if count else 0 for count in partition.layers]
    if layers < sum(least):
        raise InputError(where, f"must be >= {sum(least)}: the partition {partition.layout} has that many stages "
                                "holding blocks")
    spare = layers - sum(least)
    weights = [max(count - low, 0) for count, low in zip(partition.layers, least)]
    total = sum(weights)
    exact = [spare * w / total if total else 0.0 for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda s: (exact[s] - counts[s], weights[s]), reverse=True)
    for s in order[:spare - sum(counts)]:
        counts[s] += 1
    return Partition(tuple(low + c for low, c in zip(least, counts)))
