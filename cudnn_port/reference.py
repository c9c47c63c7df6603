"""NumPy reference of cuDNN's forward math; the judge of every artifact in tests and ``verify``.

Deliberately plain: one time step at a time, one sequence length at a time, float64 throughout, no code shared
with the fast export paths. Math (docs/conventions.md, section 2), gates in cuDNN order, ``σ`` the logistic
function::

    LSTM  i = σ(W_i x + b_W_i + R_i h + b_R_i)   f, o likewise    c~ = tanh(W_c x + b_W_c + R_c h + b_R_c)
          c' = f * c + i * c~                    h' = o * tanh(c')     (with projection: h' = Proj @ (o * tanh(c')))
    GRU   r = σ(W_r x + b_W_r + R_r h + b_R_r)   z likewise
          h~ = tanh(W_h x + b_W_h + r * (R_h h + b_R_h))      h' = (1 - z) * h~ + z * h
          (reset before, ``reset_after=False``, not a cuDNN cell: h~ = tanh(W_h x + b_W_h + R_h (r * h) + b_R_h))
    (``RNNSpec.activation`` another function in place of tanh, ``RNNSpec.recurrent_activation`` another in place of
    σ, hard_sigmoid the commonest: not cuDNN cells either; Keras' definitions, :data:`FUNCTIONS`)
    RNN   h' = act(W x + b_W + R h + b_R)             act = tanh (rnn_tanh) or max(0, .) (rnn_relu)

Batches are right-padded: outputs at t >= length are zero; the forward final state is the state at
length - 1; the backward direction runs from length - 1 down to 0 and its final state is the one after step 0.
A bidirectional layer's output is concat(forward, backward) on the feature axis.
"""
import functools
import math
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Tuple

import numpy as np

if TYPE_CHECKING:
    from .canonical import CanonicalRNN, LayerParams


def _sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def _relu(v):
    return np.maximum(v, 0.0)


# a cell's functions (RNNSpec.activation, recurrent_activation), as Keras 3 defines them (keras.activations)
FUNCTIONS: Dict[str, Callable[..., Any]] = {"tanh": np.tanh, "relu": _relu, "sigmoid": _sigmoid,
             "hard_sigmoid": lambda v: np.clip(v + 3.0, 0.0, 6.0) / 6.0,  # relu6(x + 3) / 6
             "linear": lambda v: v, "softsign": lambda v: v / (1.0 + np.abs(v)),
             "softplus": lambda v: np.logaddexp(0.0, v),
             "elu": lambda v: np.where(v > 0, v, np.expm1(np.minimum(v, 0)))}
_SELU_ALPHA, _SELU_SCALE = 1.67326324, 1.05070098  # Keras' selu: scale * elu(x, alpha)
_erf = np.vectorize(math.erf, otypes=[np.float64])
FUNCTIONS.update({
    "silu": lambda v: v * _sigmoid(v),
    "gelu": lambda v: 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0))),  # approximate=False, Keras' default
    "selu": lambda v: _SELU_SCALE * np.where(v > 0, v, _SELU_ALPHA * np.expm1(np.minimum(v, 0))),
    "relu6": lambda v: np.clip(v, 0.0, 6.0),
    "leaky_relu": lambda v: np.where(v >= 0, v, 0.2 * v),  # negative_slope 0.2, Keras' default
    "exponential": np.exp,
    "mish": lambda v: v * np.tanh(np.logaddexp(0.0, v)),
    "hard_silu": lambda v: v * np.clip(v + 3.0, 0.0, 6.0) / 6.0,
    "log_sigmoid": lambda v: -np.logaddexp(0.0, -v),
    "tanh_shrink": lambda v: v - np.tanh(v),
    "hard_tanh": lambda v: np.clip(v, -1.0, 1.0),
    "celu": lambda v: np.maximum(v, 0.0) + np.minimum(0.0, np.expm1(v)),  # alpha 1, Keras' default
    "hard_shrink": lambda v: np.where(np.abs(v) > 0.5, v, 0.0),  # threshold 0.5, Keras' default
    "soft_shrink": lambda v: np.where(v > 0.5, v - 0.5, np.where(v < -0.5, v + 0.5, 0.0)),
    "sparse_plus": lambda v: np.where(v <= -1, 0.0, np.where(v < 1, (v + 1.0) ** 2 / 4.0, v)),
    "sparse_sigmoid": lambda v: np.where(v <= -1, 0.0, np.where(v >= 1, 1.0, (v + 1.0) / 2.0)),
    "squareplus": lambda v: (v + np.sqrt(v * v + 4.0)) / 2.0,  # b 4, Keras' default
})


def _softmax(v):
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sparsemax(v):
    """Keras 3's sparsemax over the last axis, as all its backends compute it (keras/src/backend/*/nn.py): tau is
    (the sum, over the support, of the sorted values' running sums - 1) / the support's size. That is Martins et al.'s
    threshold only where the support holds one value; a model computes Keras' version, so this is it.

    Keras' tau jumps where a value enters the support, and models sit on that edge: a saturated gate is exactly 1 in
    float32 and 1 - 1e-12 in float64, so a cell state of exact float32 integers gets another support in float64
    (outputs 0.3-0.8 apart, measured on trained-looking LSTMs). The support is therefore decided in float32, as the
    models compute it; tau and the output keep ``v``'s dtype."""
    dtype = v.dtype
    single = v.astype(np.float32)
    ranked = -np.sort(-single, axis=-1)
    running = np.cumsum(ranked, axis=-1, dtype=np.float32)
    support = ranked - (running - np.float32(1)) / np.arange(1, v.shape[-1] + 1, dtype=np.float32) > 0
    running = np.cumsum(-np.sort(-v, axis=-1), axis=-1)  # v's dtype, the same order (ties sum alike)
    size = support.sum(axis=-1, keepdims=True).astype(dtype)
    tau = (np.where(support, running, dtype.type(0)).sum(axis=-1, keepdims=True) - dtype.type(1)) / size
    return np.maximum(v - tau, dtype.type(0))


# tf_loop.PER_BLOCK: over the last axis of one gate's block (the steps here run one sequence: a vector)
FUNCTIONS.update({"softmax": _softmax, "log_softmax": lambda v: v - v.max(axis=-1, keepdims=True) - np.log(
    np.exp(v - v.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True)), "sparsemax": _sparsemax})


def lstm_step(params: "LayerParams", x: np.ndarray, h: np.ndarray, c: np.ndarray,
              act: Callable = np.tanh, gate: Callable = _sigmoid) -> Tuple[np.ndarray, np.ndarray]:
    """One LSTM step for one sequence. x ``[I]``, h ``[S]`` (P with projection, else H), c ``[H]`` -> (h', c')."""
    pre = [params.W[g] @ x + params.b_W[g] + params.R[g] @ h + params.b_R[g] for g in range(4)]
    i, f, o = gate(pre[0]), gate(pre[1]), gate(pre[3])
    c_new = f * c + i * act(pre[2])
    h_new = o * act(c_new)
    return (h_new if params.P is None else params.P @ h_new), c_new


def gru_step(params: "LayerParams", x: np.ndarray, h: np.ndarray,
             c: Optional[np.ndarray] = None, act: Callable = np.tanh, gate: Callable = _sigmoid
             ) -> Tuple[np.ndarray, None]:
    """One GRU step for one sequence (cuDNN's reset-after form). x ``[I]``, h ``[H]`` -> (h', None)."""
    r = gate(params.W[0] @ x + params.b_W[0] + params.R[0] @ h + params.b_R[0])
    z = gate(params.W[1] @ x + params.b_W[1] + params.R[1] @ h + params.b_R[1])
    h_tilde = act(params.W[2] @ x + params.b_W[2] + r * (params.R[2] @ h + params.b_R[2]))
    return (1.0 - z) * h_tilde + z * h, None


def gru_reset_before_step(params: "LayerParams", x: np.ndarray, h: np.ndarray,
                          c: Optional[np.ndarray] = None, act: Callable = np.tanh, gate: Callable = _sigmoid
                          ) -> Tuple[np.ndarray, None]:
    """One step of the reset-before GRU (Keras' ``reset_after=False``). x ``[I]``, h ``[H]`` -> (h', None)."""
    r = gate(params.W[0] @ x + params.b_W[0] + params.R[0] @ h + params.b_R[0])
    z = gate(params.W[1] @ x + params.b_W[1] + params.R[1] @ h + params.b_R[1])
    h_tilde = act(params.W[2] @ x + params.b_W[2] + params.R[2] @ (r * h) + params.b_R[2])
    return (1.0 - z) * h_tilde + z * h, None


def rnn_step(params: "LayerParams", x: np.ndarray, h: np.ndarray, c: Optional[np.ndarray] = None,
             act: Callable = np.tanh, gate: Optional[Callable] = None) -> Tuple[np.ndarray, None]:
    """One plain RNN step for one sequence (``act``: tanh for ``rnn_tanh``, relu for ``rnn_relu``; no gate). x
    ``[I]``, h ``[H]`` -> (h', None)."""
    return act(params.W[0] @ x + params.b_W[0] + params.R[0] @ h + params.b_R[0]), None


STEPS: Dict[str, Callable[..., Any]] = {"lstm": lstm_step, "gru": gru_step, "rnn_tanh": rnn_step, "rnn_relu": rnn_step}


def _biased(function: Callable, scale) -> Callable:
    return lambda v: function(v) * scale


def _cast(params, dtype):
    return type(params)(*(None if a is None else np.asarray(a, dtype=dtype)
                          for a in (params.W, params.R, params.b_W, params.b_R, params.P)))


def forward(canon: "CanonicalRNN", x: np.ndarray, lengths: Optional[np.ndarray] = None,
            h_0: Optional[np.ndarray] = None, c_0: Optional[np.ndarray] = None,
            dtype: type = np.float64, ulps: float = 0.0) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """Run the stack ``canon`` (a CanonicalRNN) on a right-padded batch.

    x: ``[B, T, I]``; lengths: ``[B]`` ints in 0..T (default T; a row of length 0 runs no step: zero outputs, its
    initial states); h_0 ``[L*D, B, S]`` and c_0 ``[L*D, B, H]`` (default zeros; c_0 only for LSTM; S = P with a
    projection, else H). Returns ``(outputs [B, T, D*S], h_n [L*D, B, S], c_n [L*D, B, H] or None)`` in float64
    (``dtype=np.float32``: the same math in fp32, which measures the fp32 rounding error of a case, its "fp32
    floor"; ``ulps``: every value of the cell's functions scaled by ``1 + ulps * eps`` of ``dtype``, the bias of a
    runtime whose tanh and sigmoid are approximations a few ulp off, as onnxruntime's and OpenVINO's are).

    >>> from cudnn_port.layout import RNNSpec, unpack
    >>> spec = RNNSpec("gru", 2, 3, 5, bidirectional=True)
    >>> canon = unpack(spec, np.random.default_rng(0).normal(size=spec.param_count))
    >>> y, h_n, _ = forward(canon, np.ones((2, 4, 5)), lengths=[4, 1])
    >>> y.shape, h_n.shape, float(abs(y[1, 1:]).max())
    ((2, 4, 6), (4, 2, 3), 0.0)
    """
    spec = canon.spec
    x = np.asarray(x, dtype=dtype)
    B, T, _ = x.shape
    H, S, D = spec.num_units, spec.state_size, spec.num_dirs
    lengths = np.full(B, T) if lengths is None else np.asarray(lengths)
    h_0 = np.zeros((spec.num_pseudo_layers, B, S), dtype) if h_0 is None else np.asarray(h_0, dtype=dtype)
    is_lstm = spec.mode == "lstm"
    c_0 = np.zeros((spec.num_pseudo_layers, B, H), dtype) if c_0 is None else np.asarray(c_0, dtype=dtype)
    # the cell's function: the candidate's (and LSTM's cell output's), tanh in cuDNN's LSTM and GRU; a plain RNN's own
    act, gate = FUNCTIONS[spec.activation], FUNCTIONS[spec.recurrent_activation]
    if ulps:
        act, gate = (_biased(f, dtype(1) + dtype(ulps * np.finfo(dtype).eps)) for f in (act, gate))
    step = functools.partial(STEPS[spec.mode] if spec.reset_after else gru_reset_before_step, act=act, gate=gate)
    h_n, c_n = np.zeros_like(h_0), np.zeros_like(c_0)
    layer_in = x
    for layer in range(spec.num_layers):
        layer_out: np.ndarray = np.zeros((B, T, D * S), dtype)
        for direction in range(D):
            p = layer * D + direction
            params = _cast(canon.layers[p], dtype)
            for b in range(B):
                n = int(lengths[b])
                h, c = h_0[p, b], c_0[p, b]
                steps = range(n) if direction == 0 else range(n - 1, -1, -1)
                for t in steps:
                    h, c = step(params, layer_in[b, t], h, c)
                    layer_out[b, t, direction * S:(direction + 1) * S] = h
                h_n[p, b] = h
                if is_lstm:
                    c_n[p, b] = c
        layer_in = layer_out
    return layer_in, h_n, (c_n if is_lstm else None)
