"""The one error type the CLI turns into a one-line message and a non-zero exit."""


class TlmError(Exception):
    """A user-facing failure (bad input, unsupported model, corrupt file)."""
