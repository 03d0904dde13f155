"""Figures: Gantt charts of schedules, the memory/time frontier, benchmark plots.

matplotlib is imported inside the functions that draw, so importing ppsolve stays fast.
"""
