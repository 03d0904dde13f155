"""``ppsolve schema problem|schedule``: print a file format's JSON Schema."""

from __future__ import annotations

import argparse
import json

from ppsolve.schemas import SCHEMA_NAMES, load_schema


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("schema", help="print the JSON Schema of the problem or schedule file")
    parser.add_argument("which", choices=SCHEMA_NAMES)
    return parser


def run(args: argparse.Namespace) -> int:
    print(json.dumps(load_schema(args.which), indent=2))
    return 0
