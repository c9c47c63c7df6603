"""cudnn-port: cuDNN RNN weights to canonical per-cell weights and CPU artifacts, with no GPU.

>>> import numpy as np
>>> from cudnn_port import RNNSpec, unpack, pack
>>> spec = RNNSpec("lstm", num_layers=2, num_units=8, input_size=5, bidirectional=True)
>>> blob = np.random.default_rng(0).normal(size=spec.param_count).astype("float32")
>>> bool((pack(unpack(spec, blob)) == blob).all())
True

Importing the package imports neither TensorFlow nor Keras: the functions below import them when called.
"""
from ._version import __version__
from .canonical import CanonicalRNN, LayerParams
from .converter import convert
from .errors import CudnnPortError, ParityError, UnsupportedError
from .inspection import inspect_source
from .layout import RNNSpec, pack, unpack
from .roads.model import export
from .verify import verify

inspect_checkpoint = inspect_source  # the name earlier versions used

__all__ = ["CanonicalRNN", "CudnnPortError", "LayerParams", "ParityError", "RNNSpec", "UnsupportedError", "convert",
           "export", "inspect_checkpoint", "inspect_source", "pack", "unpack", "verify", "__version__"]
