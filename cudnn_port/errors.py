"""Error types. The CLI prints a :class:`CudnnPortError` as one line and exits 2, a :class:`ParityError` as one line
and exits 1."""

import re


class CudnnPortError(Exception):
    """Bad input or usage: the message names the problem and the fix."""


class UnsupportedError(CudnnPortError, NotImplementedError):
    """Valid for cuDNN, but not implemented by cudnn-port; the message says why."""


class NotWritten(CudnnPortError):
    """A format cannot hold this model (its reason is the message); the road writes the rest and warns."""


class ParityError(Exception):
    """An artifact disagrees with its judge: the export is wrong, whatever was written. ``report`` is the parity
    report (a dict with ``rows`` and ``passed``); ``report_path`` where it was kept, if anywhere."""

    def __init__(self, message, report=None, report_path=None):
        super().__init__(message)
        self.report, self.report_path = report, report_path


def reason(error: BaseException, limit: int = 80) -> str:
    """What an exception from a library says, fit for one short line: its first line, file paths shortened to
    their last part, at most ``limit`` characters.

    >>> reason(RuntimeError("TensorBundle at /tmp/x/model.ckpt: Checksum does not match\\nstack trace"))
    'RuntimeError: TensorBundle at model.ckpt: Checksum does not match'
    >>> reason(ValueError("x" * 100), limit=20)
    'ValueError: xxxxxxx…'
    """
    text = (getattr(error, "message", None) or str(error)).strip()
    text = re.sub(r"(?:/[^\s/:;,()'\"]+)+/([^\s/:;,()'\"]+)", r"\1", text.splitlines()[0] if text else "")
    text = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"


def short(name: str, limit: int = 60) -> str:
    """A name from a file (a variable, a layer, a format) fit to quote in a one-line message: at most ``limit``
    characters, its start and end kept.

    >>> short("model/" + "x" * 100 + "/opaque_kernel", limit=30)
    'model/xxxxxxxxx…/opaque_kernel'
    """
    name = " ".join(str(name).split())
    if len(name) <= limit:
        return name
    tail = (limit - 1) // 2
    return name[:limit - 1 - tail] + "…" + name[-tail:]
