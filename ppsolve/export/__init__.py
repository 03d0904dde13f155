"""Exporters: a schedule written in another tool's format.

``EXPORTERS`` maps each ``ppsolve export --to`` name to the module that writes it;
a module provides ``write(schedule, path, **options)``. Add a format by adding
one entry; modules are imported only when chosen.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ppsolve.errors import InputError


@dataclass(frozen=True)
class Exporter:
    """A target format: its ``--to`` name, the module that writes it, a one-line description."""

    name: str
    module: str
    description: str
    suffix: str

    def write(self, schedule: Any, path: str | Path, **options: Any) -> Any:
        return importlib.import_module(self.module).write(schedule, path, **options)


EXPORTERS: dict[str, Exporter] = {
    exporter.name: exporter
    for exporter in (
        Exporter("chrome-trace", "ppsolve.export.chrome_trace",
                 "Trace Event JSON for Perfetto (ui.perfetto.dev) and chrome://tracing", ".json"),
        Exporter("torch", "ppsolve.export.torch_csv",
                 "compute_comms CSV (sends and receives placed; side file for offload and recompute) or "
                 "compute_only CSV for torch.distributed.pipelining's _PipelineScheduleRuntime._load_csv",
                 ".csv"),
        Exporter("torchtitan", "ppsolve.export.torchtitan",
                 "a directory for torchtitan: the compute-only CSV its pipeline_parallel_schedule_csv loads, the "
                 "side plan for ppsolve.executor.torchtitan.apply_plan, and its pipeline settings", ""),
    )
}


def get_exporter(name: str) -> Exporter:
    """The exporter called ``name``; InputError listing the known ones on a miss."""
    try:
        return EXPORTERS[name.lower()]
    except KeyError:
        raise InputError("exporter", f"unknown format {name!r}; known: {', '.join(EXPORTERS)}") from None
