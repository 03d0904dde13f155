"""The pipeline-layout options that every command writing a problem file takes."""

from __future__ import annotations

import argparse

from ppsolve.problem import PLACEMENTS


def add_layout_arguments(parser: argparse.ArgumentParser, microbatches_required: bool = True) -> None:
    """--devices, --chunks, --placement, --microbatches, --micro-batch-size, --backward."""
    parser.add_argument("--devices", type=int, required=True, help="pipeline ranks d")
    parser.add_argument("--chunks", type=int, default=1, help="stages per device v (default 1)")
    parser.add_argument("--placement", choices=PLACEMENTS, default="linear")
    parser.add_argument("--microbatches", type=int, required=microbatches_required,
                        help="microbatches m per iteration")
    parser.add_argument("--micro-batch-size", type=int, help="override the model file's micro_batch_size")
    parser.add_argument("--backward", choices=("split", "fused"), default="split")
