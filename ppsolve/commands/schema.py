"""``ppsolve schema NAME``: print a file format's JSON Schema (problem, schedule, and the cost model's)."""

from __future__ import annotations

import argparse
import json

from ppsolve.costmodel.descriptions import SCHEMA_NAMES as COSTMODEL_SCHEMAS, load_costmodel_schema
from ppsolve.schemas import SCHEMA_NAMES, load_schema


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("schema", help="print the JSON Schema of a file format (problem, schedule, "
                                                  "transformer, hardware, gpus)")
    parser.add_argument("which", choices=SCHEMA_NAMES + COSTMODEL_SCHEMAS)
    return parser


def run(args: argparse.Namespace) -> int:
    schema = load_schema(args.which) if args.which in SCHEMA_NAMES else load_costmodel_schema(args.which)
    print(json.dumps(schema, indent=2))
    return 0
