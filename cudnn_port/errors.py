"""Error types. The CLI prints a :class:`CudnnPortError` as one line and exits 2, a :class:`ParityError` as one line
and exits 1."""


class CudnnPortError(Exception):
    """Bad input or usage: the message names the problem and the fix."""


class UnsupportedError(CudnnPortError, NotImplementedError):
    """Valid for cuDNN, but not implemented by cudnn-port; the message says why."""


class ParityError(Exception):
    """An artifact disagrees with its judge: the export is wrong, whatever was written. ``report`` is the parity
    report (a dict with ``rows`` and ``passed``); ``report_path`` where it was kept, if anywhere."""

    def __init__(self, message, report=None, report_path=None):
        super().__init__(message)
        self.report, self.report_path = report, report_path
