"""One reader per input format, each opening a path as a :class:`cudnn_port.source.Source` (the protocol every
reader implements: named arrays, some of them cuDNN buffers). :mod:`cudnn_port.roads.stack` takes it from there.

- TensorFlow checkpoints (TF1 name-based, TF2 object-based): :class:`cudnn_port.checkpoint.Checkpoint`; one
  holding only TF1 canonical cells (no buffer) gets a synthesised buffer from :mod:`.tf1_canonical`
- Keras 2 ``.h5`` files with CuDNNLSTM / CuDNNGRU layers: :class:`.keras_h5.KerasH5`
- Keras 3 models (in memory, ``.keras`` files, or ``model.save("m.h5")`` of Keras 3) of stock LSTM / GRU /
  Bidirectional layers or cudnn_port's fused layers: :class:`.keras_model.KerasModelSource`
- PyTorch files (``torch.save``, legacy, TorchScript, ``torch.export``, safetensors) holding ``nn.LSTM`` /
  ``nn.GRU`` / ``nn.RNN`` modules, read as data: :class:`.pytorch.PyTorchSource`
- ``torch.export`` programs (``.pt2``) as whole models: the graph JSON translated into a Keras model
  (:func:`.torch_program.translate`), which takes the whole-model road

:data:`SOURCES` is the registry: one :class:`SourceType` per kind, in the order they claim a path; convert, inspect,
verify and bench look a kind up there (its road, its flags, its judge) instead of switching on names.

SavedModels holding cuDNN nodes are graphs, not weights: :mod:`cudnn_port.graphs` finds and replaces their nodes.
"""
import os
from dataclasses import dataclass
from typing import Callable, Optional

from ..checkpoint import Checkpoint
from ..errors import CudnnPortError
from ..source import Source
from .keras_h5 import KerasH5, is_hdf5, is_keras3_model_h5
from .keras_model import KerasModelSource
from .platform import check_source
from .tf1_canonical import with_canonical_stacks
from .pytorch import PyTorchSource, is_pytorch_file
from .torch_program import PROGRAM_FORMAT, is_program, translate
from ..paths import is_saved_model


@dataclass(frozen=True)
class SourceType:
    """One kind of source: ``kind`` (the one name every module uses), ``words`` (for users), ``road`` ("stack":
    stack by stack, :mod:`cudnn_port.roads.stack`; "model": a whole Keras model, :mod:`cudnn_port.roads.model`;
    "graph": a SavedModel's graph, :mod:`cudnn_port.roads.graph`), ``claims(path)`` (by content, not name),
    ``open(path, mode)`` (the :class:`~cudnn_port.source.Source`; None for the graph road, which reads no
    arrays), and ``spec_flags`` (whether the spec flags may settle what the file does not state)."""

    kind: str
    words: str
    road: str
    claims: Callable[[str], bool]
    open: Optional[Callable[[str, Optional[str]], Source]]
    spec_flags: bool = False


def _open_checkpoint(path, mode=None):
    checkpoint = Checkpoint(path)
    check_source(checkpoint)
    return with_canonical_stacks(checkpoint)


def _open_pytorch(path, mode=None):
    return PyTorchSource(path, mode=mode)


def _open_program(path, mode=None):
    source = KerasModelSource(translate(path), os.path.abspath(path))
    source.format = PROGRAM_FORMAT
    return source


def _keras_model(path):
    if path.endswith(".keras") and os.path.lexists(path) and not os.path.isdir(path):
        return True
    return os.path.isfile(path) and is_hdf5(path) and is_keras3_model_h5(path)


SOURCES = (
    SourceType("saved_model", "SavedModel", "graph", is_saved_model, None),
    SourceType("keras_model", "Keras 3 model (.keras, or a Keras 3 .h5)", "model", _keras_model,
               lambda path, mode=None: KerasModelSource.from_file(path)),
    SourceType("keras_h5", "Keras 2 .h5 file", "stack", lambda path: os.path.isfile(path) and is_hdf5(path),
               lambda path, mode=None: KerasH5(path)),
    SourceType("torch_program", PROGRAM_FORMAT, "model", lambda path: os.path.isfile(path) and is_program(path),
               _open_program),
    SourceType("pytorch", "PyTorch file", "stack", is_pytorch_file, _open_pytorch, spec_flags=True),
    SourceType("checkpoint", "TensorFlow checkpoint", "stack", lambda path: True, _open_checkpoint,
               spec_flags=True),  # a prefix, index or folder; also what does not exist yet
)
WEIGHTS = tuple(t.kind for t in SOURCES if t.road == "stack")  # the kinds converted stack by stack


def source_type(path: "os.PathLike[str] | str") -> SourceType:
    """The :class:`SourceType` that claims ``path``, decided here once for convert, inspect and the readers."""
    path = os.fspath(path)
    return next(t for t in SOURCES if t.claims(path))


def source_kind(path: "os.PathLike[str] | str") -> str:
    """The kind of ``path`` (:func:`source_type`'s name): "saved_model", "keras_model", "keras_h5",
    "torch_program", "pytorch" or "checkpoint"."""
    return source_type(path).kind


def open_source(path: "os.PathLike[str] | str", mode: Optional[str] = None) -> Source:
    """The source at ``path`` as :func:`source_type` classifies it. ``mode``: what ``--mode`` says where the file
    does not (an ``nn.RNN``'s tanh or relu)."""
    path = os.fspath(path)
    found = source_type(path)
    if found.open is None:
        raise CudnnPortError(f"{path} is a {found.words}: a graph, not named arrays (cudnn_port.roads.graph reads it)")
    return found.open(path, mode)
