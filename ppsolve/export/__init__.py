"""Exporters of schedules to other runtimes' formats (no torch import)."""
