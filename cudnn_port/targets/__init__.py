"""One module per target format, each with the same verbs.

``write_layer(spec, prefix, layer, direction, params, slot=False) -> {name: array}`` maps one pseudo-layer's
LayerParams, and ``write(canon, prefix, slot=False) -> {name: array}`` maps a CanonicalRNN to the tensors that format names,
under the scope ``prefix`` (slot=True for an optimizer slot of the buffer: a summed bias then takes the b_W
slot, since cuDNN's b_W and b_R receive identical gradients and so hold identical Adam/momentum slots).
``read(tensors, prefix, spec) -> CanonicalRNN`` is its inverse (a summed bias comes back whole in b_W, with
b_R = 0: the same function). ``detect(shapes, prefix) -> RNNSpec or None`` reads the spec off stored names.
"""
from . import keras, pytorch, tf1

STYLES = {"tf1": tf1, "keras": keras, "pytorch": pytorch}
