"""Gate orders of every format, as named strings, and the one helper that reorders between them.

A gate order is a string of one letter per gate block. LSTM letters: i (input), f (forget),
c (cell candidate, also called g), o (output). GRU letters: r (reset), z (update), h (candidate).
A plain RNN (``rnn_tanh`` / ``rnn_relu``) has one block, h.
"""
from typing import Sequence

import numpy as np

CUDNN_LSTM = "ifco"  # cuDNN linLayerID 0..3 (and 4..7 for R)
CUDNN_GRU = "rzh"  # cuDNN linLayerID 0..2 (and 3..5 for R)
TF1_LSTM = "icfo"  # LSTMBlockCell / CudnnCompatibleLSTMCell kernel columns
KERAS_LSTM = "ifco"
KERAS_GRU = "zrh"
ONNX_LSTM = "iofc"
ONNX_GRU = "zrh"
TORCH_LSTM = "ifco"
TORCH_GRU = "rzh"

CUDNN_RNN = "h"  # cuDNN linLayerID 0 (and 1 for R)
ONNX_RNN = "h"
CUDNN_ORDER = {"lstm": CUDNN_LSTM, "gru": CUDNN_GRU, "rnn_tanh": CUDNN_RNN, "rnn_relu": CUDNN_RNN}


def reorder(blocks: np.ndarray, src: Sequence[str], dst: Sequence[str], axis: int = 0) -> np.ndarray:
    """Reorder the gate blocks of ``blocks`` along ``axis`` from order ``src`` to order ``dst``.

    ``blocks.shape[axis]`` must be a multiple of ``len(src)``; each of the ``len(src)`` equal slices is
    one gate. ``dst`` may name a subset of ``src``'s gates (e.g. ``"rz"`` to keep only two).

    >>> reorder(np.arange(4), "ifco", "icfo").tolist()
    [0, 2, 1, 3]
    """
    blocks = np.asarray(blocks)
    if sorted(set(dst)) != sorted(dst) or not set(dst) <= set(src):
        raise ValueError(f"Received gate orders {src!r} -> {dst!r}, expected {dst!r} to use gates of {src!r} once each")
    n = blocks.shape[axis]
    if n % len(src):
        raise ValueError(f"Received axis of length {n}, expected a multiple of {len(src)} gates ({src!r})")
    parts = np.split(blocks, len(src), axis=axis)
    return np.concatenate([parts[src.index(g)] for g in dst], axis=axis)
