"""Error types. The CLI prints a :class:`CudnnPortError` as one line and exits 2."""


class CudnnPortError(Exception):
    """Bad input or usage: the message names the problem and the fix."""


class UnsupportedError(CudnnPortError, NotImplementedError):
    """Valid for cuDNN, but not implemented by cudnn-port; the message says why."""
