"""Reading JSON input with clear errors, and writing output files atomically."""

from __future__ import annotations

import json
import math
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ppsolve.errors import InputError


def read_json(path: str | os.PathLike, what: str) -> Any:
    """Parse the JSON file at ``path``; ``what`` names it in error messages."""
    if path is None or not os.fspath(path):
        raise InputError(what, "no file given (an empty path)")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(what, f"file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(what, f"cannot read {path}: {exc}") from None
    if not text.strip():
        raise InputError(what, f"{path} is empty")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InputError(what, f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise InputError(what, f"{path} is nested too deeply to read") from None
    except ValueError as exc:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise InputError(what, f"{path} holds a number too long to read ({str(exc).split(';')[0]})") from None


def _reject_constant(name: str) -> float:
    # NaN and Infinity are not JSON; keep them so validation names the field.
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]


def require_directory(path: str | os.PathLike) -> None:
    """Refuse an output path whose directory does not exist (commands call it before any work)."""
    parent = Path(path).parent
    if not parent.is_dir():
        raise InputError(str(path), f"cannot write: directory {parent} does not exist")


@contextmanager
def _atomic_target(path: Path):
    """Yield a temporary file beside ``path``; on success it replaces ``path``, else it is removed.

    A missing directory is an error, not created: a mistyped path must not pass silently.

    The new file gets the permissions an ordinary ``open()`` would give it (0666 less the umask).
    """
    require_directory(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise InputError(str(path), f"cannot write: {exc.strerror or exc}") from None
    try:
        yield fd
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise InputError(str(path), f"cannot write: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one."""
    with _atomic_target(Path(path)) as fd, os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Text twin of :func:`write_bytes_atomic` (UTF-8)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")
