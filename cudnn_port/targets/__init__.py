"""One module per target format, each with the same verbs.

``write_layer(spec, prefix, layer, direction, params, slot=False) -> {name: array}`` maps one pseudo-layer's
LayerParams, and ``write(canon, prefix, slot=False) -> {name: array}`` maps a CanonicalRNN to the tensors that format
names,
under the scope ``prefix`` (slot=True for an optimizer slot of the buffer: a summed bias then takes the b_W
slot, since cuDNN's b_W and b_R receive identical gradients and so hold identical Adam/momentum slots).
``read(tensors, prefix, spec) -> CanonicalRNN`` is its inverse (a summed bias comes back whole in b_W, with
b_R = 0: the same function). ``detect(shapes, prefix) -> RNNSpec or None`` reads the spec off stored names.
"""
from types import ModuleType, SimpleNamespace
from typing import Dict, Optional, Sequence, Union

from . import keras, pytorch, tf1

STYLES = {"tf1": tf1, "keras": keras, "pytorch": pytorch}


def target_for(style: str, shapes: Dict[str, Sequence[int]], prefix: str) -> Union[ModuleType, SimpleNamespace]:
    """The module that writes ``style`` for the stack under ``prefix``. A tf1 source that already uses the older
    TF1 names (``multi_rnn_cell/…`` with ``bias_cudnn_0/1``) keeps them, so the graph that saved it restores."""
    module = STYLES[style]
    return module.variant(shapes, prefix) if hasattr(module, "variant") else module


def reader(style: str, scheme: Optional[str] = None) -> Union[ModuleType, SimpleNamespace]:
    """The module that reads back what :func:`target_for` wrote (``scheme`` as the manifest recorded it)."""
    return tf1.LEGACY if style == "tf1" and scheme == "legacy" else STYLES[style]
