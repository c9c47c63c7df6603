"""The canonical model every reader produces and every writer consumes.

One :class:`LayerParams` per pseudo-layer ``p = layer * D + direction`` (forward 0, backward 1), gates in
cuDNN order (LSTM i, f, c, o; GRU r, z, h), biases kept separate as cuDNN keeps them.
"""
from dataclasses import dataclass

import numpy as np


@dataclass
class LayerParams:
    """Weights of one pseudo-layer. W ``[G, H, I_l]``, R ``[G, H, H]``, b_W ``[G, H]``, b_R ``[G, H]``.

    ``W[g] @ x + b_W[g] + R[g] @ h + b_R[g]`` is gate g's pre-activation (GRU's candidate puts r on the R part).
    """

    W: np.ndarray
    R: np.ndarray
    b_W: np.ndarray
    b_R: np.ndarray


@dataclass
class CanonicalRNN:
    """A whole stack: its :class:`~cudnn_port.layout.RNNSpec` and ``spec.num_pseudo_layers`` LayerParams."""

    spec: object
    layers: list

    def layer(self, layer, direction=0):
        """The LayerParams of (layer, direction)."""
        return self.layers[layer * self.spec.num_dirs + direction]

    def pseudo_layers(self):
        """Yield (layer, direction, LayerParams) in buffer order."""
        for p, params in enumerate(self.layers):
            yield p // self.spec.num_dirs, p % self.spec.num_dirs, params
