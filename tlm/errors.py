"""The one error type the CLI turns into a one-line message and a non-zero exit."""


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
