"""Keras 3 ``LSTM`` / ``GRU(reset_after=True)`` / ``SimpleRNN`` (wrapped in ``Bidirectional`` for D = 2)::

    LSTM  kernel [I_l, 4H] = hstack_g(W_g.T), gates i, f, c, o     recurrent_kernel [H, 4H] likewise from R
          bias [4H] = b_W + b_R
    GRU   kernel [I_l, 3H] = hstack_g(W_g.T), gates z, r, h        recurrent_kernel [H, 3H] likewise from R
          bias [2, 3H] = [[b_W z, r, h], [b_R z, r, h]]        (GRU(reset_after=False): bias [3H] = b_W + b_R)
    RNN   kernel [I_l, H] = W.T                                    recurrent_kernel [H, H] = R.T
          bias [H] = b_W + b_R                  (SimpleRNN, activation "tanh" for rnn_tanh, "relu" for rnn_relu)

Checkpoint names: ``{prefix}/layer_{l}/{forward,backward}/{kernel,recurrent_kernel,bias}``. :func:`save_model`
writes a ``.keras`` file of ``Input([None, I]) -> L recurrent layers (return_sequences=True)`` that plain Keras
loads and runs on CPU; layer ``layer_{l}`` holds (layer l, both directions).
"""
from typing import TYPE_CHECKING, Dict, List, Sequence

import numpy as np

from ..canonical import CanonicalRNN, LayerParams
from ..errors import UnsupportedError
from ..gates import CUDNN_GRU, CUDNN_LSTM, CUDNN_RNN, KERAS_GRU, KERAS_LSTM, reorder
from .common import bias_sum, join, write_all

if TYPE_CHECKING:
    import keras
    from ..layout import RNNSpec

ORDER = {"lstm": (CUDNN_LSTM, KERAS_LSTM), "gru": (CUDNN_GRU, KERAS_GRU), "rnn_tanh": (CUDNN_RNN, CUDNN_RNN),
         "rnn_relu": (CUDNN_RNN, CUDNN_RNN)}
VARS = ("kernel", "recurrent_kernel", "bias")


def _scope(prefix, layer, direction):
    return join(prefix, f"layer_{layer}/{'backward' if direction else 'forward'}")


def check(spec: "RNNSpec") -> None:
    """Keras' LSTM has no projection: refuse a projected stack with the fix."""
    if spec.num_proj:
        raise UnsupportedError(f"a {spec.describe()} cannot be written as Keras layers: Keras' LSTM has no "
                               "projection; use --style tf1 (LSTMCell(num_proj=...)) or --style pytorch")


def layer_weights(spec: "RNNSpec", p: LayerParams, slot: bool = False) -> List[np.ndarray]:
    """[kernel, recurrent_kernel, bias] of one Keras LSTM / GRU / SimpleRNN layer from LayerParams ``p``."""
    check(spec)
    src, dst = ORDER[spec.mode]
    W, R = reorder(p.W, src, dst), reorder(p.R, src, dst)
    kernel = W.reshape(-1, W.shape[2]).T
    recurrent = R.reshape(-1, R.shape[2]).T
    if spec.mode != "gru" or not spec.reset_after:  # one bias, b_W + b_R
        bias = reorder(bias_sum(p.b_W, p.b_R, slot), src, dst).reshape(-1)
    else:
        bias = np.stack([reorder(p.b_W, src, dst).reshape(-1), reorder(p.b_R, src, dst).reshape(-1)])
    return [kernel, recurrent, bias]


def write_layer(spec: "RNNSpec", prefix: str, layer: int, direction: int, p: LayerParams,
                slot: bool = False) -> Dict[str, np.ndarray]:
    scope = _scope(prefix, layer, direction)
    return {f"{scope}/{var}": value for var, value in zip(VARS, layer_weights(spec, p, slot))}


def write(canon: CanonicalRNN, prefix: str, slot: bool = False) -> Dict[str, np.ndarray]:
    return write_all(write_layer, canon, prefix, slot)


def read(tensors: Dict[str, np.ndarray], prefix: str, spec: "RNNSpec") -> CanonicalRNN:
    src, dst = ORDER[spec.mode]
    G, H, layers = spec.num_gates, spec.num_units, []
    for p in range(spec.num_pseudo_layers):
        scope = _scope(prefix, *divmod(p, spec.num_dirs))
        kernel, recurrent, bias = (np.asarray(tensors[f"{scope}/{v}"]) for v in VARS)
        W = reorder(kernel.T.reshape(G, H, -1), dst, src)
        R = reorder(recurrent.T.reshape(G, H, H), dst, src)
        if spec.mode != "gru" or not spec.reset_after:  # one bias: b_W, and zeros for b_R
            b_W, b_R = reorder(bias.reshape(G, H), dst, src), np.zeros((G, H), bias.dtype)
        else:
            b_W, b_R = (reorder(b.reshape(G, H), dst, src) for b in bias)
        layers.append(LayerParams(W=W, R=R, b_W=b_W, b_R=b_R))
    return CanonicalRNN(spec, layers)


def detect(shapes: Dict[str, Sequence[int]], prefix: str) -> None:
    return None


def build_model(canon: CanonicalRNN, name: str = "rnn") -> "keras.Model":
    """A Keras 3 functional model computing the stack on full-length batches ``[B, T, I] -> [B, T, D*H]``."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    spec = canon.spec
    x = inputs = keras.Input((None, spec.input_size), name="inputs", dtype=spec.dtype)
    for layer in range(spec.num_layers):
        def cell(direction, name):
            kwargs = dict(return_sequences=True, dtype=spec.dtype, go_backwards=bool(direction), name=name)
            if spec.is_rnn:
                return keras.layers.SimpleRNN(spec.num_units, activation=spec.activation, **kwargs)
            kwargs.update(activation=spec.activation, recurrent_activation=spec.recurrent_activation)
            return (keras.layers.LSTM(spec.num_units, **kwargs) if spec.mode == "lstm"
                    else keras.layers.GRU(spec.num_units, reset_after=spec.reset_after, **kwargs))

        if spec.bidirectional:
            rnn = keras.layers.Bidirectional(cell(0, f"forward_{layer}"), backward_layer=cell(1, f"backward_{layer}"),
                                             name=f"layer_{layer}")
        else:
            rnn = cell(0, f"layer_{layer}")
        x = rnn(x)
        weights = []
        for direction in range(spec.num_dirs):
            weights += layer_weights(spec, canon.layer(layer, direction))
        rnn.set_weights(weights)
    return keras.Model(inputs, x, name=name)


def save_model(canon: CanonicalRNN, path: str, name: str = "rnn") -> None:
    """Write :func:`build_model`'s model to ``path`` (a ``.keras`` file)."""
    build_model(canon, name).save(str(path))
