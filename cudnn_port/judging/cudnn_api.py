"""A second statement of cuDNN's weight layout, written from the cuDNN API, for verify's reference to read buffers by.

It is not derived from :meth:`cudnn_port.layout.RNNSpec.blocks` (the one the converter, the writers and the fused
layers read buffers by), so a layout or offset error there cannot hide in the judge too. What cuDNN documents
(``cudnnGetRNNWeightParams(handle, rnnDesc, pseudoLayer, weightSpaceSize, weightSpace, linLayerID, mDesc, mAddr,
bDesc, bAddr)``, cuDNN 8 and 9 API reference):

- ``pseudoLayer`` counts layer by layer, the forward direction first: ``pseudoLayer = layer * D + direction``;
- ``linLayerID`` 0 .. G-1 are the input weight matrices, ``G`` .. ``2G-1`` the recurrent ones, each with its bias;
  LSTM (``CUDNN_LSTM``, G = 4): 0 / 4 input gate, 1 / 5 forget gate, 2 / 6 new memory (cell) gate, 3 / 7 output
  gate; GRU (``CUDNN_GRU``, G = 3): 0 / 3 reset gate, 1 / 4 update gate, 2 / 5 new memory gate; ``CUDNN_RNN_TANH``
  and ``CUDNN_RNN_RELU`` (G = 1): 0 the input matrix, 1 the recurrent one; an LSTM with
  projection (``cudnnSetRNNDescriptor_v8``'s ``projSize`` < ``hiddenSize``) adds ``linLayerID`` 8, the recurrent
  projection, a matrix with no bias;
- each matrix is ``[hiddenSize, inputs]`` in row-major order: ``inputs`` is the layer's input width for the input
  matrices (``inputSize`` for layer 0, ``D * projSize`` above it) and ``projSize`` for the recurrent ones; the
  projection is ``[projSize, hiddenSize]``.

The API gives each address, not the order in the weight space. The order, measured on cuDNN 9.19 (offsets read back
through ``cudnnGetRNNWeightParams``, ``tests/fixtures/cudnn``): every matrix first, in (``pseudoLayer``,
``linLayerID``) order, then every bias in the same order, with no padding. :func:`matrices_and_biases` encodes that
and nothing else; ``tests/test_cudnn_fixtures.py`` checks it against cuDNN's recorded offsets, and verify reports a
disagreement between the two statements as a failed row.
"""
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import numpy as np
from ..canonical import CanonicalRNN, LayerParams

if TYPE_CHECKING:
    from ..canonical import CanonicalRNN
    from ..layout import RNNSpec

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
PROJECTION = 8  # the LSTM recurrent projection's linLayerID


def matrices_and_biases(mode: str, num_layers: int, hidden: int, input_size: int, directions: int, proj: int,
                        buffer: np.ndarray) -> Dict[Tuple[int, int], Tuple[np.ndarray, Optional[np.ndarray]]]:
    """{(pseudoLayer, linLayerID): (matrix, bias or None)} of a cuDNN weight space ``buffer`` (1-D)."""
    gates, out = GATES[mode], (proj or hidden)
    shapes = []  # (pseudoLayer, linLayerID, matrix shape, has a bias), in weight-space order
    for layer in range(num_layers):
        width = input_size if layer == 0 else directions * out
        for direction in range(directions):
            pseudo = layer * directions + direction
            shapes += [(pseudo, lin, (hidden, width), True) for lin in range(gates)]
            shapes += [(pseudo, gates + lin, (hidden, out), True) for lin in range(gates)]
            if proj:
                shapes.append((pseudo, PROJECTION, (proj, hidden), False))
    buffer = np.asarray(buffer).reshape(-1)
    matrices: Dict[Tuple[int, int], np.ndarray] = {}
    biases: Dict[Tuple[int, int], Optional[np.ndarray]] = {}
    offset = 0
    for pseudo, lin, shape, _ in shapes:
        size = shape[0] * shape[1]
        matrices[(pseudo, lin)], biases[(pseudo, lin)] = buffer[offset:offset + size].reshape(shape), None
        offset += size
    for pseudo, lin, shape, has_bias in shapes:
        if has_bias:
            biases[(pseudo, lin)] = buffer[offset:offset + shape[0]]
            offset += shape[0]
    if offset != buffer.size:
        raise ValueError(f"a {mode} weight space of these sizes holds {offset} elements, the buffer {buffer.size}")
    return {key: (matrix, biases[key]) for key, matrix in matrices.items()}


def offsets(mode: str, num_layers: int, hidden: int, input_size: int, directions: int,
            proj: int) -> Dict[Tuple[int, int], Tuple[int, int]]:
    """{(pseudoLayer, linLayerID): (matrix offset, bias offset or -1)} in elements, from :func:`matrices_and_biases`
    of a buffer of element indices."""
    gates, out = GATES[mode], (proj or hidden)
    size = 0
    for layer in range(num_layers):
        width = input_size if layer == 0 else directions * out
        size += directions * (gates * hidden * (width + out + 2) + proj * hidden)
    index = np.arange(size)
    return {key: (int(m.flat[0]), -1 if b is None else int(b[0]))
            for key, (m, b) in matrices_and_biases(mode, num_layers, hidden, input_size, directions, proj,
                                                   index).items()}


def canonical(spec: "RNNSpec", buffer: np.ndarray) -> "CanonicalRNN":
    """The stack's :class:`~cudnn_port.canonical.CanonicalRNN` read through this statement (gates in cuDNN order,
    as the reference takes them)."""
    gates, D = GATES[spec.mode], spec.num_dirs
    found = matrices_and_biases(spec.mode, spec.num_layers, spec.num_units, spec.input_size, D, spec.num_proj,
                                buffer)
    def bias(key: Tuple[int, int]) -> np.ndarray:
        b = found[key][1]
        assert b is not None  # every gate's matrix has a bias; only the projection has none
        return b

    layers: List[LayerParams] = []
    for pseudo in range(spec.num_layers * D):
        W = np.stack([found[(pseudo, g)][0] for g in range(gates)])
        R = np.stack([found[(pseudo, gates + g)][0] for g in range(gates)])
        b_W = np.stack([bias((pseudo, g)) for g in range(gates)])
        b_R = np.stack([bias((pseudo, gates + g)) for g in range(gates)])
        P = found[(pseudo, PROJECTION)][0] if spec.num_proj else None
        layers.append(LayerParams(W, R, b_W, b_R, P))
    return CanonicalRNN(spec, layers)


def disagreement(first: "CanonicalRNN", second: "CanonicalRNN") -> str:
    """"" when two CanonicalRNNs of one buffer are equal, else where they first differ."""
    for p, (a, b) in enumerate(zip(first.layers, second.layers)):
        for kind in ("W", "R", "b_W", "b_R", "P"):
            x, y = getattr(a, kind), getattr(b, kind)
            if (x is None) != (y is None) or (x is not None and not np.array_equal(np.asarray(x), np.asarray(y))):
                return f"pseudo-layer {p}, {kind}"
    return ""
