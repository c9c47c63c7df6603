"""cudnn-port: cuDNN RNN weights to canonical per-cell weights and CPU artifacts, with no GPU.

>>> import numpy as np
>>> from cudnn_port import RNNSpec, unpack, pack
>>> spec = RNNSpec("lstm", num_layers=2, num_units=8, input_size=5, bidirectional=True)
>>> blob = np.random.default_rng(0).normal(size=spec.param_count).astype("float32")
>>> bool((pack(unpack(spec, blob)) == blob).all())
True
"""
__version__ = "0.1.0"

from .canonical import CanonicalRNN, LayerParams  # noqa: E402
from .errors import CudnnPortError, UnsupportedError  # noqa: E402
from .layout import RNNSpec, pack, unpack  # noqa: E402


def convert(*args, **kwargs):
    """See :func:`cudnn_port.converter.convert` (imported lazily: it pulls in TensorFlow)."""
    from .converter import convert as _convert

    return _convert(*args, **kwargs)


def export(*args, **kwargs):
    """See :func:`cudnn_port.model_export.export`: a trained Keras model with fused layers -> CPU artifacts."""
    from .model_export import export as _export

    return _export(*args, **kwargs)


def inspect_checkpoint(*args, **kwargs):
    """See :func:`cudnn_port.converter.inspect_checkpoint`."""
    from .converter import inspect_checkpoint as _inspect

    return _inspect(*args, **kwargs)


__all__ = ["CanonicalRNN", "CudnnPortError", "LayerParams", "RNNSpec", "UnsupportedError", "convert", "export",
           "inspect_checkpoint", "pack", "unpack", "__version__"]
