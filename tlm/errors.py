"""Failures and their output, shared by every stage: the one error type the CLI turns into a
one-line message and a non-zero exit, one-line summaries of library exceptions, and silencing
of C++ / torch logging on stderr."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile


class TlmError(Exception):
    """A user-facing failure (bad input, unsupported model, corrupt file)."""


def read_json(path, what: str = ""):
    """The JSON data in `path`; a one-line TlmError if it cannot be read or parsed."""
    import json
    from pathlib import Path

    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise TlmError(f"unreadable {what + ' ' if what else ''}{path}: {err}") from None


def first_line(err: BaseException, last: bool = True, limit: int | None = 300) -> str:
    """One line of an exception's message, at most `limit` characters: TVM puts the useful line
    last (`last=True`), torch and Hugging Face first."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    line = (lines[-1] if last else lines[0]) if lines else type(err).__name__
    return line if limit is None else line[:limit]


@contextlib.contextmanager
def quiet_stderr():
    """Silence C++ and torch logging on fd 2 (graph dumps, TVM warnings) unless TLM_DEBUG=1."""
    if os.environ.get("TLM_DEBUG") == "1":
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
