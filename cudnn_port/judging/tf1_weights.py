"""verify's per-stack judge of a TF1 checkpoint that holds canonical cells and no cuDNN buffer: each gate's matrix
read from the checkpoint's own tensors by TF1's names and gate orders, not through the reader the artifacts came
from (``readers/tf1_canonical.py`` and the tf1 target), so a gate that reader maps wrongly fails every row.

Written from TensorFlow 1.15's cell definitions:

- ``CudnnCompatibleLSTMCell`` (``LSTMBlockCell(forget_bias=0)``) and ``LSTMCell`` (``lstm_cell``):
  ``i, j, f, o = split([x, h] @ kernel + bias, 4)``; ``j`` is cuDNN's cell gate ``c``, so cuDNN's gates i, f, c, o
  are TF1's column blocks 0, 2, 1, 3; ``kernel`` rows are ``x``'s then ``h``'s. The older saveable's
  ``bias_cudnn_0`` / ``bias_cudnn_1`` (b_W, b_R, same block order) are read where present, else ``bias`` is b_W and
  b_R is zero (the math sums them). ``LSTMCell(num_proj)`` adds ``projection/kernel [H, P]``: ``h = m @ kernel``.
- ``CudnnCompatibleGRUCell``: ``r, u = split(sigmoid([x, h] @ gates/kernel + gates/bias), 2)`` (cuDNN's r, z);
  the candidate ``tanh(x @ candidate/input_projection/kernel + its bias + r * (h @
  candidate/hidden_projection/kernel + its bias))`` is cuDNN's h gate, W and R parts with their own biases.
- the scopes: ``{prefix}/rnn/multi_rnn_cell/cell_{l}`` (older graphs: no ``rnn/``) and
  ``{prefix}/stack_bidirectional_rnn/cell_{l}/bidirectional_rnn/{fw,bw}``, then the cell's name.
"""
from typing import TYPE_CHECKING, Callable, Container

import numpy as np
from ..canonical import CanonicalRNN, LayerParams

if TYPE_CHECKING:
    from ..canonical import CanonicalRNN
    from ..layout import RNNSpec

LSTM_BLOCKS = (0, 2, 1, 3)  # cuDNN gate g (i, f, c, o) is TF1's column block LSTM_BLOCKS[g] (i, j, f, o)
CELLS = ("cudnn_compatible_lstm_cell", "cudnn_compatible_gru_cell", "lstm_cell")


def cell_scope(names: Container[str], prefix: str, layer: int, direction: int, bidirectional: bool) -> str:
    """The scope of the TF1 cell of (layer, direction) under ``prefix`` among the checkpoint's ``names``."""
    paths = ([f"stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{'bw' if direction else 'fw'}"]
             if bidirectional else [f"rnn/multi_rnn_cell/cell_{layer}", f"multi_rnn_cell/cell_{layer}"])
    for path in paths:
        for cell in CELLS:
            scope = "/".join(part for part in (prefix, path, cell) if part)
            if f"{scope}/kernel" in names or f"{scope}/gates/kernel" in names:
                return scope
    raise KeyError(f"no TF1 cell of layer {layer}, direction {direction} under '{prefix or '(top level)'}'")


def stack_from_checkpoint(read: Callable[[str], np.ndarray], names: Container[str], variable: str,
                          spec: "RNNSpec") -> "CanonicalRNN":
    """The stack whose synthesised buffer is ``variable`` (``{prefix}/opaque_kernel``), in cuDNN's gate order, read
    by ``read(name)`` from the tensors TF1's cells saved under ``prefix``."""
    prefix = variable.rsplit("/", 1)[0] if "/" in variable else ""
    H, S = spec.num_units, spec.state_size
    layers = []
    for layer in range(spec.num_layers):
        for direction in range(spec.num_dirs):
            scope = cell_scope(names, prefix, layer, direction, spec.bidirectional)
            get = lambda name: np.asarray(read(f"{scope}/{name}"), np.float64)
            if spec.mode == "lstm":
                kernel = get("kernel")
                width = kernel.shape[0] - S
                blocks = np.split(kernel, 4, axis=1)
                W = np.stack([blocks[b][:width].T for b in LSTM_BLOCKS])
                R = np.stack([blocks[b][width:].T for b in LSTM_BLOCKS])
                if f"{scope}/bias_cudnn_0" in names:
                    b_W, b_R = (np.stack([np.split(get(f"bias_cudnn_{j}"), 4)[b] for b in LSTM_BLOCKS]) for j in (0, 1))
                else:
                    b_W, b_R = np.stack([np.split(get("bias"), 4)[b] for b in LSTM_BLOCKS]), np.zeros((4, H))
                P = get("projection/kernel").T if spec.num_proj else None
            else:
                kernel, bias = get("gates/kernel"), get("gates/bias")
                width = kernel.shape[0] - H
                r, z = np.split(kernel, 2, axis=1)
                W = np.stack([r[:width].T, z[:width].T, get("candidate/input_projection/kernel").T])
                R = np.stack([r[width:].T, z[width:].T, get("candidate/hidden_projection/kernel").T])
                b_W = np.stack(np.split(bias, 2) + [get("candidate/input_projection/bias")])
                b_R = np.stack([np.zeros(H), np.zeros(H), get("candidate/hidden_projection/bias")])
                P = None
            layers.append(LayerParams(W, R, b_W, b_R, P))
    return CanonicalRNN(spec, layers)
