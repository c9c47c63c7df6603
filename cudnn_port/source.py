"""What every reader gives the converter: a :class:`Source`, the same verbs for every input format; and what every
reader module declares: one :class:`SourceType`, its ``SOURCE``, which :mod:`cudnn_port.readers` discovers."""
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

import numpy as np

if TYPE_CHECKING:
    import keras

BUFFER = "opaque_kernel"
"""The last name of every cuDNN buffer variable: a fused layer's weight (:mod:`cudnn_port.layers`), a TF checkpoint's
cuDNN variable, each stack a reader synthesises (:func:`buffer_name`); spelled here alone."""

ROADS = {"stack": "weights", "model": "keras_model", "graph": "saved_model"}
"""Every road a :class:`SourceType` may take, and the ``kind`` OUT's manifest.json records for it (the manifest's
words came before the roads' and stay, so that an OUT written by any version reads the same):
:attr:`cudnn_port.manifest.Manifest.road` translates, here and nowhere else."""


class Source:
    """A readable input seen like a checkpoint: named arrays, some of which are cuDNN buffers.

    A reader sets ``prefix`` (the path it read, or a description of an in-memory model), ``format`` (words for
    inspect and the manifest), ``shapes`` and ``dtypes`` (name -> shape tuple / dtype name), and implements
    :meth:`get` and :meth:`files`. Buffers are the names ending in :data:`BUFFER`; ``specs`` holds the spec of
    each buffer whose spec the source states outright (a Keras 2 layer's shapes, a fused layer's settings).
    """

    prefix: str = ""
    format: str = ""
    default_style: str = "tf1"  # the --style a plain `convert` writes
    names_note: str = "names kept as they are"
    whole_model: bool = False  # a Keras model with fused layers: exported whole by cudnn_port.roads.model
    model_config: Optional[dict] = None  # a Keras 2 full-model file's config (rebuilt whole in Keras 3)
    model: Optional["keras.Model"] = None  # a whole-model source's model, as its road exports it
    stock_layers: List[Dict[str, Any]] = []  # a Keras model's stock recurrent layers, what became of each (none here)
    shapes: Dict[str, tuple]
    dtypes: Dict[str, str]

    @property
    def specs(self) -> Dict[str, object]:
        """{buffer name: the spec the source states outright}; this source's own (never a dict shared by all
        sources), empty until a reader sets it (a checkpoint holds bare buffers)."""
        return self.__dict__.setdefault("_specs", {})

    @specs.setter
    def specs(self, value: Dict[str, object]) -> None:
        self.__dict__["_specs"] = value

    @property
    def names(self) -> List[str]:
        """Every variable's name, in the reader's order."""
        return list(self.shapes)

    def get(self, name: str) -> np.ndarray:
        """The value of variable ``name``."""
        raise NotImplementedError

    def files(self) -> List[str]:
        """The files this source was read from (hashed into the manifest, checked by verify)."""
        raise NotImplementedError

    def describe(self, name: str) -> str:
        """How buffer ``name`` was found, in words."""
        return f"cuDNN opaque buffer ({self.format})"

    def nothing_found(self) -> str:
        """The error message when the source holds no cuDNN buffer."""
        return (f"no cuDNN buffer in {self.prefix}: no variable name ends in {BUFFER}; name it with "
                "--variable NAME (cudnn-port inspect lists the variables)")


def buffer_name(scope: str) -> str:
    """The buffer variable of the stack under ``scope`` (``""``: at the top level).

    >>> buffer_name("encoder/lstm"), buffer_name("")
    ('encoder/lstm/opaque_kernel', 'opaque_kernel')
    """
    return f"{scope}/{BUFFER}" if scope else BUFFER


@dataclass(frozen=True)
class SourceType:
    """One kind of source, declared by its reader module as ``SOURCE``:

    - ``kind``: the one name every module uses for it (``"pytorch"``); ``words``: the same for users;
    - ``road``: ``"stack"`` (stack by stack, :mod:`cudnn_port.roads.stack`), ``"model"`` (a whole Keras model,
      :mod:`cudnn_port.roads.model`) or ``"graph"`` (a SavedModel's graph, :mod:`cudnn_port.roads.graph`);
    - ``claims(path)``: whether ``path`` is of this kind, by its content; kinds are asked in ``order``;
    - ``open(path, mode)``: the :class:`Source` (None on the graph road, which reads no named arrays); ``mode`` is
      ``--mode``, for a file that leaves the mode open (an ``nn.RNN``'s tanh or relu);
    - ``spec_flags``: whether the spec flags (``--mode`` ... ``--num-proj``) may settle what the file leaves open;
    - ``judge``: ``"module:function"`` of verify's per-stack judge that reads the source file by its format's own
      documented rule, not through this reader (``function(path, variable, spec) -> (CanonicalRNN, words)``), or
      None where the stacks are buffers as saved (the cuDNN API's statement of the layout judges them);
    - ``original``: ``"module:function"`` of a verify row in which the source's own framework runs the stack from
      the file (``function(path, variable, spec, batch, want, atol, rtol) -> row``: PyTorch's ``nn.LSTM``), or None;
    - ``export``: on the model road (and only there), ``"module:function"`` of the exporter that takes the file
      whole (``function(path, out, **convert's options) -> Manifest``: :mod:`cudnn_port.roads.model`'s);
    - ``translated``: on the model road, whether the file is translated into a Keras model (a ``.pt2``'s program)
      rather than being one (a ``.keras``): OUT's ``keras/model.keras`` is then the conversion's own output, which
      cannot judge the artifacts alone, so verify judges them by the source's framework too.

    The ``"module:function"`` fields name modules above the readers (the judges, the roads), which a reader must not
    import; :meth:`named` imports one when it is called for.
    """

    kind: str
    words: str
    road: str
    claims: Callable[[str], bool]
    open: Optional[Callable[[str, Optional[str]], Source]]
    spec_flags: bool = False
    order: int = 50
    judge: Optional[str] = None
    original: Optional[str] = None
    export: Optional[str] = None
    translated: bool = False

    def __post_init__(self) -> None:
        if self.road not in ROADS:
            raise ValueError(f"source kind {self.kind!r}: road {self.road!r} is none of {', '.join(ROADS)}")
        if (self.road == "model") != (self.export is not None):
            raise ValueError(f"source kind {self.kind!r}: an exporter (export=) is for the model road and needed "
                             "there")
        if self.translated and self.road != "model":
            raise ValueError(f"source kind {self.kind!r}: only a model-road kind is translated into a Keras model")

    def named(self, field: str) -> Callable:
        """The function this kind's ``field`` (``judge``, ``original`` or ``export``) names as ``"module:function"``,
        imported."""
        module, function = getattr(self, field).split(":")
        return getattr(importlib.import_module(module), function)
