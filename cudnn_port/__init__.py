"""cudnn-port: cuDNN RNN weights to canonical per-cell weights and CPU artifacts, with no GPU.

>>> import numpy as np
>>> from cudnn_port import RNNSpec, unpack, pack
>>> spec = RNNSpec("lstm", num_layers=2, num_units=8, input_size=5, bidirectional=True)
>>> blob = np.random.default_rng(0).normal(size=spec.param_count).astype("float32")
>>> bool((pack(unpack(spec, blob)) == blob).all())
True

Importing the package imports neither TensorFlow nor Keras: the functions below import them when called.
"""
from ._version import __version__  # noqa: E402
from .canonical import CanonicalRNN, LayerParams  # noqa: E402
from .converter import convert  # noqa: E402
from .errors import CudnnPortError, ParityError, UnsupportedError  # noqa: E402
from .inspection import inspect_source  # noqa: E402
from .layout import RNNSpec, pack, unpack  # noqa: E402
from .model_export import export  # noqa: E402
from .verify import verify  # noqa: E402

inspect_checkpoint = inspect_source  # the name earlier versions used

__all__ = ["CanonicalRNN", "CudnnPortError", "LayerParams", "ParityError", "RNNSpec", "UnsupportedError", "convert",
           "export", "inspect_checkpoint", "inspect_source", "pack", "unpack", "verify", "__version__"]
