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
- TorchScript files (``torch.jit.save``): their code parsed as data into the same graph (:mod:`.torchscript`),
  whole where it is a straight line of ops, else their stacks (:mod:`.torchscript_source`)

:func:`sources` is the registry: each reader module declares one :class:`~cudnn_port.source.SourceType` as
``SOURCE`` (found with ``pkgutil``, no list to edit); convert, inspect, verify and bench look a path's kind up there
(its road, its flags, its judge) instead of switching on names. A new kind of source is one module here plus its
test.

SavedModels holding cuDNN nodes are graphs, not weights: :mod:`cudnn_port.graphs` finds and replaces their nodes.
"""
import os
from typing import Dict, Optional

from ..discover import declared, insert
from ..errors import CudnnPortError
from ..source import Source, SourceType

_REGISTRY: Dict[str, SourceType] = {}


def sources() -> Dict[str, SourceType]:
    """Every registered kind of source by name, in the order they claim a path: the ``SOURCE`` of each module of
    this package, imported once (they are light)."""
    if not _REGISTRY:
        _REGISTRY.update(declared(__name__, __path__, "SOURCE", SourceType, "kind"))
    return _REGISTRY


def register(kind: SourceType) -> None:
    """Add ``kind`` to the registry, in its ``order``, as its module would (a test's toy source); a kind already
    registered is refused, as a format's name is."""
    insert(sources(), kind, "kind", "source kind")


def unregister(kind: str) -> None:
    sources().pop(kind, None)


def kinds_on(road: str) -> tuple:
    """The kinds that take ``road`` ("stack", "model", "graph")."""
    return tuple(t.kind for t in sources().values() if t.road == road)


def source_type(path: "os.PathLike[str] | str") -> SourceType:
    """The :class:`~cudnn_port.source.SourceType` that claims ``path``, decided here once for convert, inspect,
    verify and the readers (a TensorFlow checkpoint prefix claims what no other kind does, and what does not exist)."""
    path = os.fspath(path)
    if os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):
        raise CudnnPortError(f"{path} is not a regular file or folder (a pipe, a socket or a device); pass the model "
                             "file itself")
    return next(t for t in sources().values() if t.claims(path))


def source_kind(path: "os.PathLike[str] | str") -> str:
    """The kind of ``path``: :func:`source_type`'s ``kind``."""
    return source_type(path).kind


def translated_from(words: Optional[str]) -> bool:
    """Whether an OUT whose manifest records its source's ``format`` as ``words`` was converted from a kind that is
    :attr:`~cudnn_port.source.SourceType.translated` (a ``.pt2``): the kind whose ``words`` these are (a format a
    reader words by what it found, "Keras 3 model", is no kind's), so that code asks the kind, not its words."""
    return any(t.translated for t in sources().values() if t.words == words)


def loads_as_keras(path: "os.PathLike[str] | str") -> bool:
    """Whether ``path`` is a whole Keras model as it stands (a ``.keras``, not a ``.pt2`` translated into one): a
    kind on the model road that is not :attr:`~cudnn_port.source.SourceType.translated`."""
    found = source_type(path)
    return found.road == "model" and not found.translated


def open_source(path: "os.PathLike[str] | str", mode: Optional[str] = None) -> Source:
    """The source at ``path`` as :func:`source_type` classifies it. ``mode``: what ``--mode`` says where the file
    does not (an ``nn.RNN``'s tanh or relu)."""
    path = os.fspath(path)
    found = source_type(path)
    if found.open is None:
        raise CudnnPortError(f"{path} is a {found.words}: a graph, not named arrays (cudnn_port.roads.graph reads it)")
    return found.open(path, mode)


WEIGHTS = kinds_on("stack")  # the kinds converted stack by stack
