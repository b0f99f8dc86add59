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

#: Longest line a collector reads. NCCL formats each debug line into a 1,024-byte buffer
#: (``ncclDebugLogV`` in src/debug.cc) and its longest arguments, the NET/IB device list
#: (``char line[2048]`` in src/transport/net_ib.cc) and ring dumps (cut at 20 ranks with
#: "..." in src/graph/rings.cc), stay within a few KiB; nccl-tests and HCCL plog lines are
#: shorter. A longer line is damage, and skipping it keeps every regex's work bounded.
MAX_LINE_CHARS = 8192
#: Ranks, rank counts and channels beyond this are damage, not a job (the largest NCCL jobs
#: run about 100,000 ranks; NCCL's MAXCHANNELS is 64): a record holding one is dropped
#: before anything is sized by it (a ``nRanks 99999999999999999999`` line once cost 5.7 GB).
MAX_RANK = 1 << 20


def lines_of(text: str) -> list[str]:
    """Split on ``\\n``, ``\\r\\n`` or ``\\r`` only, so line numbers match what an editor shows
    (``str.splitlines`` would also split on form feeds and Unicode separators in garbled
    text); a final unterminated line is kept."""
    lines = _NEWLINE.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def numbered_lines(text: str, source: str | None, warnings: list[ParseWarning]):
    """``(line number, line)`` of every line of :func:`lines_of` up to
    :data:`MAX_LINE_CHARS`; each longer line is skipped with a warning in ``warnings``."""
    for lineno, line in enumerate(lines_of(text), start=1):
        if len(line) > MAX_LINE_CHARS:
            warnings.append(warn(f"line of {len(line):,} characters, more than the "
                                 f"{MAX_LINE_CHARS:,} any CCL prints; skipped", lineno, source))
            continue
        yield lineno, line


# Characters no CCL prints: C0 controls other than tab/newlines, and the replacement character
# that decoding puts where bytes were not UTF-8.
GARBLED = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd]")


def looks_garbled(line: str) -> bool:
    """True when the line holds bytes no CCL prints (NUL, replacement char, controls)."""
    return GARBLED.search(line) is not None


def warn(message: str, line: int | None, source: str | None) -> ParseWarning:
    where = f"line {line}: " if line is not None else ""
    return ParseWarning(message=f"{where}{message}", line=line, source=source)
