"""Making a matplotlib figure without pyplot and writing it as PNG, SVG or PDF atomically."""

from __future__ import annotations

import io
from pathlib import Path

from ppsolve.errors import InputError
from ppsolve.jsonio import write_bytes_atomic

IMAGE_FORMATS = ("png", "svg", "pdf")


def image_format(path: str | Path, where: str = "output") -> str:
    """The image format named by a file's extension; InputError for anything else."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in IMAGE_FORMATS:
        raise InputError(where, f"image must end in .png, .svg or .pdf, got {str(path)!r}")
    return suffix


def new_figure(width: float, height: float, layout: str | None = None):
    """A matplotlib Figure of the given size in inches, detached from pyplot's global state.
    ``layout="constrained"`` lets matplotlib place the axes; else the caller does."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout=layout)


def _as_typed(figure) -> None:
    """Every text of ``figure`` drawn as typed: ``$`` is not matplotlib's math mode, and a character the
    fonts cannot take (a lone surrogate, a control character) shows as '?' (names and units are the user's)."""
    from matplotlib.text import Text

    for text in figure.findobj(Text):
        text.set_parse_math(False)
        value = text.get_text()
        clean = "".join(c if c.isprintable() or c == "\n" else "?"
                        for c in value.encode("utf-8", "replace").decode("utf-8"))
        if clean != value:
            text.set_text(clean)


def render(figure, fmt: str, dpi: float = 100) -> bytes:
    """The figure's bytes in ``fmt``; no timestamps, so equal figures give equal files."""
    _as_typed(figure)
    metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[fmt]
    buffer = io.BytesIO()
    figure.savefig(buffer, format=fmt, dpi=dpi, metadata=metadata)
    return buffer.getvalue()


def save_figure(figure, path: str | Path, dpi: float = 100) -> None:
    """Render ``figure`` in the format its extension names and write it atomically."""
    write_bytes_atomic(path, render(figure, image_format(path), dpi))
