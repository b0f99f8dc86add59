"""Shared helpers for the text collectors: decoding and line splitting that never fail."""

from __future__ import annotations

import re
from pathlib import Path

from icefabric.schemas import ParseWarning


def to_text(data: str | bytes) -> str:
    """Decode ``data`` as UTF-8, replacing undecodable bytes (a garbled log must still parse)."""
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data


def read_text(path: str | Path) -> str:
    """Read a file as text with the same never-fail decoding as :func:`to_text`."""
    return to_text(Path(path).read_bytes())


_NEWLINE = re.compile(r"\r\n|\r|\n")


def lines_of(text: str) -> list[str]:
    """Split on ``\\n``, ``\\r\\n`` or ``\\r`` only, so line numbers match what an editor shows
    (``str.splitlines`` would also split on form feeds and Unicode separators in garbled
    text); a final unterminated line is kept."""
    lines = _NEWLINE.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


# Characters no CCL prints: C0 controls other than tab/newlines, and the replacement character
# that decoding puts where bytes were not UTF-8.
GARBLED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd]")


def looks_garbled(line: str) -> bool:
    """True when the line holds bytes no CCL prints (NUL, replacement char, controls)."""
    return GARBLED.search(line) is not None


def warn(message: str, line: int | None, source: str | None) -> ParseWarning:
    where = f"line {line}: " if line is not None else ""
    return ParseWarning(message=f"{where}{message}", line=line, source=source)
