"""One reader per input format, each opening a path as a source that looks like a checkpoint.

A source has ``prefix`` (its path), ``format`` (words), ``default_style``, ``names`` / ``shapes`` / ``dtypes``,
``get(name)``, ``files()`` and ``specs`` ({buffer name: RNNSpec} for stacks whose spec the source states outright).
Its cuDNN stacks are the names ending in ``opaque_kernel``; :mod:`cudnn_port.converter` takes it from there.

- TensorFlow checkpoints (TF1 name-based, TF2 object-based): :class:`cudnn_port.checkpoint.Checkpoint`
- Keras 2 ``.h5`` files with CuDNNLSTM / CuDNNGRU layers: :class:`.keras_h5.KerasH5`
- Keras 3 models (in memory or ``.keras`` files) holding cudnn_port's fused layers:
  :class:`.keras_model.KerasModelSource`

SavedModels holding cuDNN nodes are graphs, not weights: :mod:`.saved_model` finds and replaces their nodes.
"""
import os

from ..checkpoint import Checkpoint
from .keras_h5 import KerasH5, is_hdf5


def open_source(path):
    """The source at ``path``: a Keras ``.h5`` file, or a TensorFlow checkpoint (prefix, index, or folder)."""
    path = os.fspath(path)
    if os.path.isfile(path) and is_hdf5(path):
        return KerasH5(path)
    if os.path.isfile(path) and path.endswith(".keras"):
        from .keras_model import KerasModelSource

        return KerasModelSource.from_file(path)
    return Checkpoint(path)
