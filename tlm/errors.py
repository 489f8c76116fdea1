"""Failures and their output, shared by every stage: the one error type the CLI turns into a
one-line message and a non-zero exit, one-line summaries of library exceptions, and silencing
of C++ / torch logging on stderr."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile


class TlmError(Exception):
    """A user-facing failure (bad input, unsupported model, corrupt file)."""


class TlmWarning(UserWarning):
    """A fallback or a degradation the user must hear of (a program replaced, a pass left out,
    an import done another way). The CLI hides other libraries' warnings and prints these as
    one line each (`show_tlm_warnings`)."""


def show_tlm_warnings(stream=None) -> None:
    """Other libraries' warnings off; each TlmWarning as one line `tlm: warning: ...` on stderr."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split())
        text = text[len("tlm: "):] if text.startswith("tlm: ") else text
        print(f"tlm: warning: {text}", file=stream or sys.stderr, flush=True)

    warnings.filterwarnings("ignore")
    warnings.filterwarnings("always", category=TlmWarning)
    warnings.showwarning = show


_SIGINT = {"seen": False, "flagged": 0}


def interrupted() -> bool:
    """Whether SIGINT arrived inside the current `sigint_flagged`. TVM turns a KeyboardInterrupt
    raised in a Python callback (a cost model, a runner) into its own RuntimeError, which a
    catch-all that keeps a batch or a plan going would otherwise take for one candidate's or
    step's failure."""
    return _SIGINT["seen"]


def check_interrupt() -> None:
    """Raise KeyboardInterrupt if SIGINT arrived (`interrupted`): before results that an interrupt
    may have turned into errors are kept as data."""
    if _SIGINT["seen"]:
        raise KeyboardInterrupt


@contextlib.contextmanager
def signal_handler(signum: int, handler):
    """`handler` for signal `signum` inside; the earlier one is restored on the way out."""
    import signal

    old = signal.getsignal(signum)
    signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, old)


@contextlib.contextmanager
def _sigint(raises: bool):
    """SIGINT sets `interrupted` inside, and raises KeyboardInterrupt if `raises`. Left alone where
    SIGINT is ignored (a job started in the background by a shell) or off the main thread."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) in (
            signal.SIG_IGN, None):
        yield
        return

    def handler(signum, frame):
        _SIGINT["seen"] = True
        if raises:
            raise KeyboardInterrupt

    if raises:  # a command's scope: the flag tells of this command's interrupts only
        _SIGINT["seen"] = False
        _SIGINT["flagged"] += 1
    try:
        with signal_handler(signal.SIGINT, handler):
            yield
    finally:
        _SIGINT["flagged"] -= raises
        if not _SIGINT["flagged"]:  # outside any command's scope nobody asks: cleared
            _SIGINT["seen"] = False


def sigint_flagged():
    """SIGINT raises KeyboardInterrupt as usual and also sets `interrupted` (a command's scope)."""
    return _sigint(raises=True)


def sigint_deferred():
    """SIGINT only sets `interrupted` inside: for loops of long TVM calls (MetaSchedule's search)
    that abort the whole process (std::terminate) when a KeyboardInterrupt is raised inside them;
    the loop calls `check_interrupt` between its calls. Outside `sigint_flagged` (a library
    caller) the flag is cleared on the way out."""
    return _sigint(raises=False)


PARENT_PID_ENV = "TLM_PARENT_PID"  # set by a parent for a child that must end with it (`die_with_parent`)


def die_with_parent(parent: int | str | None = None, sig: int | None = None) -> None:
    """End this process (signal `sig`, default SIGTERM) when its parent process dies, so that a
    `kill -9` of a tlm command leaves no child running: on Linux the kernel's parent-death signal
    (prctl PR_SET_PDEATHSIG; it follows the parent *thread* that started this process, so start
    children from a thread that lives as long as they should), elsewhere a daemon thread that
    polls the parent's pid. `parent`: the pid the parent had when it started this process (read
    before arming, so a parent that died in between is caught); default the current parent."""
    import signal
    import threading

    sig = signal.SIGTERM if sig is None else int(sig)
    try:
        parent = os.getppid() if parent in (None, "") else int(parent)
    except ValueError:
        parent = os.getppid()
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            armed = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # the parent died before the signal was armed
        os.kill(os.getpid(), sig)
        return
    if armed:
        return

    def watch():
        import time

        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), sig)

    threading.Thread(target=watch, name="tlm-die-with-parent", daemon=True).start()


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
    lines = [ln.strip() for ln in str(err).strip().splitlines()
             if ln.strip() and not ln.strip().startswith("# Metadata omitted")]  # TVM's note after printed IR
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


# TVM's noise in a message: the metadata note, traceback frames, C++ backtrace lines.
_NOISE = re.compile(
    r"^(# Metadata omitted|Traceback \(most recent call last\)|File \"|\[bt\]|Stack trace|-{3,}$|\d+: |at )")


def _op_names(line: str) -> str:
    """TVM prints an operator in a message as its object, `ir.Op(span=None, ty=ir.Type(...),
    name="relax.log", ...)`: each becomes its name."""
    while (start := line.find("ir.Op(")) >= 0:
        depth, end, quoted = 0, len(line), False
        for i in range(start + 5, len(line)):
            ch = line[i]
            quoted = not quoted if ch == '"' else quoted
            depth += 0 if quoted else (ch == "(") - (ch == ")")
            if depth == 0:
                end = i + 1
                break
        name = re.search(r'name="([\w.]+)"', line[start:end])
        line = line[:start] + (name.group(1) if name else "an operator") + line[end:]
    return line


def reason(err: BaseException, limit: int = 300) -> str:
    """TVM's (or any library's) message on one line, without TVM's noise: the metadata note,
    traceback frames and the Relax text of a quoted call (the operator is named separately)."""
    lines = [ln.strip() for ln in str(err).strip().splitlines() if ln.strip()]
    kept, skip = [], False
    for ln in lines:
        if ln.startswith("Offending call"):
            skip = True  # the call's text follows; described from the module instead
            continue
        if skip and (ln.startswith(("R.", "%", "relax.")) or _NOISE.match(ln)):
            continue
        skip = False
        if not _NOISE.match(ln):
            kept.append(ln)
    kept = [_op_names(ln) for ln in kept]
    text = " ".join(kept) if len(" ".join(kept)) <= limit else kept[-1] if kept else ""
    text = text or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
