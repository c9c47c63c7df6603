"""The canonical model every reader produces and every writer consumes.

One :class:`LayerParams` per pseudo-layer ``p = layer * D + direction`` (forward 0, backward 1), gates in
cuDNN order (LSTM i, f, c, o; GRU r, z, h; RNN h), biases kept separate as cuDNN keeps them. The arrays may be NumPy
arrays or TensorFlow tensors (:func:`cudnn_port.tf_graph.unpack_tensor`); :func:`input_bias` works on both.
"""
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Tuple


@dataclass
class LayerParams:
    """Weights of one pseudo-layer. W ``[G, H, I_l]``, R ``[G, H, S]``, b_W ``[G, H]``, b_R ``[G, H]``, and for an
    LSTM with projection P ``[P, H]`` (S = P; else S = H and P is None).

    ``W[g] @ x + b_W[g] + R[g] @ h + b_R[g]`` is gate g's pre-activation (GRU's candidate puts r on the R part).
    """

    W: Any
    R: Any
    b_W: Any
    b_R: Any
    P: Optional[Any] = None


@dataclass
class CanonicalRNN:
    """A whole stack: its :class:`~cudnn_port.layout.RNNSpec` and ``spec.num_pseudo_layers`` LayerParams."""

    spec: Any
    layers: List[LayerParams]

    def layer(self, layer: int, direction: int = 0) -> LayerParams:
        """The LayerParams of (layer, direction)."""
        return self.layers[layer * self.spec.num_dirs + direction]

    def pseudo_layers(self) -> Iterator[Tuple[int, int, LayerParams]]:
        """Yield (layer, direction, LayerParams) in buffer order."""
        for p, params in enumerate(self.layers):
            yield p // self.spec.num_dirs, p % self.spec.num_dirs, params


def input_bias(mode: str, b_W: Any, b_R: Any, concat: Callable[[List[Any]], Any], reset_after: bool = True) -> Any:
    """The one bias the fast paths add to the input projection, gates in cuDNN order, ``[G*H]``.

    LSTM, the plain RNNs and a reset-before GRU (``reset_after=False``): ``b_W + b_R`` for every block. GRU: ``b_W +
    b_R`` for r and z, but ``b_W`` alone for h, whose ``b_R`` sits inside ``r * (R_h h + b_R_h)`` and is added there.
    ``concat`` joins a list along axis 0 (``np.concatenate`` or ``tf.concat``), so NumPy arrays and TensorFlow tensors
    share this one definition.

    >>> import numpy as np
    >>> input_bias("gru", np.ones((3, 2)), np.full((3, 2), 2.0), np.concatenate).tolist()
    [3.0, 3.0, 3.0, 3.0, 1.0, 1.0]
    """
    if mode != "gru" or not reset_after:  # LSTM's four blocks, a plain RNN's one, a reset-before GRU's three
        return concat([b_W[g] + b_R[g] for g in range(int(b_W.shape[0]))])
    return concat([b_W[0] + b_R[0], b_W[1] + b_R[1], b_W[2]])
