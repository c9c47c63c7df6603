"""Only cudnn-port's own words on stderr.

TensorFlow, absl, oneDNN, XLA, grappler and onnxruntime log from C++ straight to file descriptor 2, some of it
before TensorFlow reads ``TF_CPP_MIN_LOG_LEVEL`` (TF 2.21: "WARNING: All log messages before absl::InitializeLog()
is called are written to STDERR", then "I0000 ... port.cc:153] oneDNN custom operations are on"), and tf2onnx,
Keras and absl-py log and warn from Python. None of it is the user's to act on: a real failure also raises, and
that exception becomes cudnn-port's one line. So while :func:`quiet_stderr` is active:

- fd 2 is a pipe read by a thread that forwards every line except those in the foreign log formats
  (:data:`FOREIGN`, and the indented or known continuation lines that follow them); a fatal line (``F...``,
  "Check failed", "terminate called"), which ends the process before Python can say anything, is forwarded as
  one ``cudnn-port: internal error`` line;
- Python warnings are ignored and the libraries' Python loggers (:data:`LOGGERS`) let nothing through.

``cudnn-port --verbose`` or ``CUDNN_PORT_VERBOSE=1`` turns all of it off: every foreign line comes through.

These are process-wide settings: the CLI holds them for its whole run (:func:`cudnn_port.cli.main` runs inside
:func:`quiet_stderr`), and the library's calls (``convert``, ``export``, ``verify``) hold them
for the duration of the call alone (:func:`library_call`: fd 2, the warnings filters and the loggers given back as
they were, the environment untouched; lines in Python logging's default format pass, being the caller's own), so a
training script that calls ``cudnn_port.export`` sees only cudnn-port's
own words on stderr; ``verbose=True`` lets the libraries' lines through. A library user who wants the CLI's quiet
for more than one call, TensorFlow's import included, opts in::

    from cudnn_port.quiet import quiet_stderr
    with quiet_stderr():   # first, before TensorFlow is imported: it also sets TensorFlow's environment (kept)
        cudnn_port.convert("model.ckpt", "out")
"""
import contextlib
import logging
import os
import re
import sys
import threading
import warnings
from typing import Iterator

LOGGERS = ("tensorflow", "absl", "tf2onnx", "keras", "onnx", "onnxruntime", "h5py", "jax")
_ANSI = re.compile(rb"\x1b\[[0-9;]*m")
FOREIGN = re.compile(rb"|".join([
    rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    rb"[IWE]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+\s+[^\s:]+:\d+\]",  # absl / glog (TF >= 2.18, absl-py)
    rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWE] [^\s:]+:\d+\]",  # TensorFlow <= 2.17
    rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \[[VIWE]:onnxruntime:",  # onnxruntime (colours stripped)
    rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - (DEBUG|INFO|WARNING|ERROR) - ",  # tf2onnx
    rb"(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:",  # Python logging's default format (tensorflow, absl)
    rb"\S+\.py:\d+: \w*Warning: ",  # a Python warning
    rb"(INFO|WARNING|ERROR|VERBOSE): ",  # TFLite / LiteRT ("INFO: Created TensorFlow Lite XNNPACK delegate")
]))
# A library call filters fd 2 while its caller may log too: the caller's Python logging ("INFO:root:...") and
# warnings in the default formats are the caller's own, so they pass. The libraries' Python loggers are silenced by
# level, and their lines filtered by name too: a library imported during the call may reset a level (tf2onnx's
# import sets absl's, and TFLite's converter then warns through it).
FOREIGN_IN_LIBRARY = re.compile(FOREIGN.pattern.replace(
    rb"(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:|",
    rb"(DEBUG|INFO|WARNING|ERROR|CRITICAL):(" + rb"|".join(n.encode() for n in LOGGERS) + rb")(\.[\w.]*)?:|")
                                .replace(rb"\S+\.py:\d+: \w*Warning: |", b""))
CONTINUED = re.compile(rb"\s|To enable the following instructions|Custom ops: |Details:|See instructions: |$")
FATAL = re.compile(rb"F\d{4} \d\d:\d\d:\d+\.\d+\s+\d+\s+[^\s:]+:\d+\]\s*(.*)|"
                   rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: F [^\s:]+:\d+\]\s*(.*)|"
                   rb"(terminate called .*)")


class _State:
    depth = 0  # quiet_stderr contexts open (fd 2 is the process's: one filter serves them all)
    verbose = False  # the outermost asked to let everything through (cudnn-port --verbose)


def is_verbose() -> bool:
    """Whether foreign logging goes through untouched: ``CUDNN_PORT_VERBOSE`` set (and not to 0 or empty), or
    inside ``quiet_stderr(verbose=True)``."""
    return _State.verbose or os.environ.get("CUDNN_PORT_VERBOSE", "") not in ("", "0")


def quiet_env() -> None:
    """Set TensorFlow's environment before it is imported (it reads it once, at import): the project's runtime
    setting (oneDNN's custom ops off, as the tests and benchmarks run; a value the user set is kept) and, unless
    :func:`is_verbose`, its C++ log level 2 (errors only)."""
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    if not is_verbose():
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class _Filter:
    """fd 2 redirected into a pipe; a thread forwards the lines that are not foreign to the real stderr."""

    def __init__(self, foreign: "re.Pattern[bytes]" = FOREIGN):
        self.foreign = foreign
        sys.stderr.flush()
        self.real = os.dup(2)
        read, write = os.pipe()
        os.dup2(write, 2)
        os.close(write)
        self.read = read
        self.thread = threading.Thread(target=self._pump, name="cudnn-port-stderr", daemon=True)
        self.thread.start()

    def close(self) -> None:
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self.real, 2)  # the pipe's last writer is gone: the thread reads to its end and stops
        self.thread.join(timeout=5)
        os.close(self.real)

    def _pump(self):
        pending, foreign = b"", False
        while True:
            try:
                chunk = os.read(self.read, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                foreign = self._line(line, foreign)
        if pending:
            self._line(pending, foreign)
        os.close(self.read)

    def _line(self, line, foreign):
        """Forward ``line`` unless it is foreign; returns whether it was (the next line may continue it)."""
        bare = _ANSI.sub(b"", line).rstrip(b"\r")
        fatal = FATAL.match(bare)
        if fatal:
            text = next(g for g in fatal.groups() if g is not None).decode(errors="replace")
            self._write(f"cudnn-port: internal error: a library aborted the process: {' '.join(text.split())[:200]}"
                        " (rerun with --verbose to see its log, and report it)\n".encode())
            return True
        if self.foreign.match(bare) or (foreign and CONTINUED.match(bare)):
            return True
        self._write(line + b"\n")
        return False

    def _write(self, data):
        while data:
            try:
                data = data[os.write(self.real, data):]
            except OSError:
                return


@contextlib.contextmanager
def quiet_stderr(verbose: bool = False) -> Iterator[None]:
    """While inside, stderr carries only cudnn-port's own lines (see the module docstring); nested uses are one.
    ``verbose=True`` (or ``CUDNN_PORT_VERBOSE=1``): everything goes through, also in the uses nested inside. Sets
    TensorFlow's environment (:func:`quiet_env`), which stays."""
    with _quiet(verbose, set_env=True):
        yield


@contextlib.contextmanager
def library_call(verbose: bool = False) -> Iterator[None]:
    """A library call's quiet: as :func:`quiet_stderr` for the duration of the call, with the environment left as
    it is; inside the CLI's (or a caller's) ``quiet_stderr`` it changes nothing."""
    with _quiet(verbose, set_env=False):
        yield


@contextlib.contextmanager
def _quiet(verbose: bool, set_env: bool) -> Iterator[None]:
    if _State.depth:
        yield
        return
    _State.verbose = verbose
    if set_env:
        quiet_env()
    loud = is_verbose()
    loggers = [] if loud else [logging.getLogger(name) for name in LOGGERS]
    levels = [logger.level for logger in loggers]
    try:
        stream = None if loud else _Filter(FOREIGN if set_env else FOREIGN_IN_LIBRARY)
    except OSError:  # no fd 2 to redirect (a closed stderr): nothing to filter
        stream = None
    _State.depth += 1
    try:
        for logger in loggers:  # jax reads its logger's level name at import and refuses "Level 51"
            logger.setLevel(logging.CRITICAL if logger.name == "jax" else logging.CRITICAL + 1)
        with warnings.catch_warnings():
            if not loud:
                warnings.simplefilter("ignore")
            yield
    finally:
        _State.depth -= 1
        _State.verbose = False
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        if stream is not None:
            stream.close()
