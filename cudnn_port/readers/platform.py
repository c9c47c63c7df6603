"""Which library's layout a fused layer's buffer is in, as :mod:`cudnn_port.layers` recorded it beside the buffer
(``{scope}/cudnn_platform``; docs/conventions.md, section 6). A buffer the fused op trained on a ROCm build is in
MIOpen's layout, not cuDNN's: it is refused, never converted as if it were cuDNN's. No record means cuDNN's layout.
"""
from typing import TYPE_CHECKING, Any, Iterable, Tuple

import numpy as np

from ..errors import UnsupportedError
from ..stored_spec import MIOPEN, PLATFORM_VARIABLE

if TYPE_CHECKING:
    from ..source import Source


def refuse_miopen(where: str, records: Iterable[Tuple[str, Any]]) -> None:
    """Raise for the first ``(buffer scope, recorded value)`` in ``records`` that says ROCm / MIOpen."""
    for scope, value in records:
        values = np.asarray(value).reshape(-1)
        if values.size == 1 and values.dtype.kind in "iu" and int(values[0]) == MIOPEN:
            raise UnsupportedError(
                f"{scope or 'the buffer'} in {where} was trained by the fused op on a ROCm build, so it is in "
                "MIOpen's layout (LSTM gates i, f, o, c), not cuDNN's; cudnn-port converts cuDNN buffers only: "
                "train or fine-tune it on a CUDA or CPU host, or export it on the ROCm host")


def check_source(source: "Source") -> None:
    """Refuse ``source`` (a checkpoint) if a ``cudnn_platform`` variable beside one of its buffers says MIOpen."""
    suffix = f"/{PLATFORM_VARIABLE}"
    names = [n for n in source.names if n == PLATFORM_VARIABLE or n.endswith(suffix)]
    refuse_miopen(source.prefix, ((n[:-len(suffix)] if n.endswith(suffix) else "", source.get(n)) for n in names))
