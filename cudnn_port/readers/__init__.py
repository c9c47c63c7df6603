"""One reader per input format, each opening a path as a :class:`cudnn_port.source.Source` (the protocol every
reader implements: named arrays, some of them cuDNN buffers). :mod:`cudnn_port.roads.stack` takes it from there.

- TensorFlow checkpoints (TF1 name-based, TF2 object-based): :class:`cudnn_port.checkpoint.Checkpoint`; one
  holding only TF1 canonical cells (no buffer) gets a synthesised buffer from :mod:`.tf1_canonical`
- Keras 2 ``.h5`` files with CuDNNLSTM / CuDNNGRU layers: :class:`.keras_h5.KerasH5`
- Keras 3 models (in memory, ``.keras`` files, or ``model.save("m.h5")`` of Keras 3) of stock LSTM / GRU /
  Bidirectional layers or cudnn_port's fused layers: :class:`.keras_model.KerasModelSource`

SavedModels holding cuDNN nodes are graphs, not weights: :mod:`cudnn_port.graphs` finds and replaces their nodes.
"""
import os

from ..checkpoint import Checkpoint
from ..source import Source
from .keras_h5 import KerasH5, is_hdf5, is_keras3_model_h5
from .keras_model import KerasModelSource
from .platform import check_source
from .tf1_canonical import with_canonical_stacks
from ..paths import is_saved_model


WEIGHTS = ("keras_h5", "checkpoint")  # the kinds converted stack by stack


def source_kind(path: "os.PathLike[str] | str") -> str:
    """What ``path`` is, decided here once for convert, inspect and the readers: "saved_model" (a folder with
    saved_model.pb: :mod:`cudnn_port.graphs`), "keras_model" (a .keras file, or a whole model Keras 3 saved as
    .h5: :mod:`cudnn_port.roads.model`), "keras_h5" (another HDF5 file: Keras 2's cuDNN layers) or "checkpoint" (a
    prefix, index or folder; also what does not exist yet)."""
    path = os.fspath(path)
    if is_saved_model(path):
        return "saved_model"
    if path.endswith(".keras") and os.path.lexists(path) and not os.path.isdir(path):
        return "keras_model"
    if os.path.isfile(path) and is_hdf5(path):
        return "keras_model" if is_keras3_model_h5(path) else "keras_h5"
    return "checkpoint"


def open_source(path: "os.PathLike[str] | str") -> Source:
    """The source at ``path`` as :func:`source_kind` classifies it: a Keras ``.h5`` file, a ``.keras`` model, or a
    TensorFlow checkpoint (prefix, index, or folder)."""
    path = os.fspath(path)
    kind = source_kind(path)
    if kind == "keras_h5":
        return KerasH5(path)
    if kind == "keras_model":
        return KerasModelSource.from_file(path)
    checkpoint = Checkpoint(path)
    check_source(checkpoint)
    return with_canonical_stacks(checkpoint)
