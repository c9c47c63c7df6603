"""TF1 ``tf.contrib.cudnn_rnn`` CPU cells: CudnnCompatibleLSTMCell / CudnnCompatibleGRUCell.

Names (prefix = scope of the buffer, e.g. ``cudnn_lstm``)::

    uni  {prefix}/rnn/multi_rnn_cell/cell_{l}/{cell}/...
    bi   {prefix}/stack_bidirectional_rnn/cell_{l}/bidirectional_rnn/{fw,bw}/{cell}/...

Older TensorFlow revisions saved unidirectional stacks as ``{prefix}/multi_rnn_cell/cell_{l}/{cell}/...`` (no
``rnn/``), and for LSTM added ``bias_cudnn_0`` = b_W and ``bias_cudnn_1`` = b_R (gate order i, c, f, o) beside
the summed ``bias``, so that b_W and b_R can be restored separately. :data:`LEGACY` reads and writes that scheme;
:func:`variant` picks it when a checkpoint already uses it.

LSTM (``cudnn_compatible_lstm_cell``, = LSTMBlockCell with forget_bias=0)::

    kernel [I_l + H, 4H] = concat_g([W_g R_g]).T  in gate order i, c, f, o      bias [4H] = b_W + b_R (i, c, f, o)

LSTM with projection P (``lstm_cell``, TF1's ``LSTMCell(num_units=H, num_proj=P, forget_bias=0.0)``; no
cuDNN-compatible cell has a projection)::

    kernel [I_l + P, 4H] = concat_g([W_g R_g]).T  in gate order i, c, f, o      bias [4H] = b_W + b_R (i, c, f, o)
    projection/kernel [H, P] = Proj.T

GRU (``cudnn_compatible_gru_cell``)::

    gates/kernel [I_l + H, 2H] = concat_g([W_g R_g]).T for g in r, z       gates/bias = b_W + b_R (r, z)
    candidate/input_projection/kernel  = W_h.T    candidate/input_projection/bias  = b_W_h
    candidate/hidden_projection/kernel = R_h.T    candidate/hidden_projection/bias = b_R_h

Plain RNN, ``rnn_tanh`` / ``rnn_relu`` (``basic_rnn_cell``, TF1's ``BasicRNNCell(H, activation=tanh / relu)``, the
cell ``CudnnRNNTanh`` / ``CudnnRNNRelu`` name as their CPU form in ``tf.contrib.cudnn_rnn``)::

    kernel [I_l + H, H] = [W R].T                                             bias [H] = b_W + b_R
"""
import re
import sys
from functools import partial
from types import ModuleType, SimpleNamespace
from typing import Dict, Optional, Sequence, Union

import numpy as np

from ..canonical import CanonicalRNN, LayerParams
from ..gates import CUDNN_GRU, CUDNN_LSTM, TF1_LSTM, reorder
from ..errors import CudnnPortError, UnsupportedError
from ..layout import RNNSpec
from .common import bias_sum, join, write_all

CELL = {"lstm": "cudnn_compatible_lstm_cell", "gru": "cudnn_compatible_gru_cell", "rnn_tanh": "basic_rnn_cell",
        "rnn_relu": "basic_rnn_cell"}
PROJECTED_CELL = "lstm_cell"  # LSTMCell(num_proj=P): the only TF1 cell with a projection
scheme = "current"  # the names this module writes; LEGACY writes the older ones


def cell_scope(prefix: str, spec: RNNSpec, layer: int, direction: int, legacy: bool = False) -> str:
    """The variable scope of the cell of (layer, direction)."""
    if spec.bidirectional:
        scope = f"stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{'fw' if direction == 0 else 'bw'}"
    else:
        scope = f"{'' if legacy else 'rnn/'}multi_rnn_cell/cell_{layer}"
    return join(prefix, f"{scope}/{PROJECTED_CELL if spec.num_proj else CELL[spec.mode]}")


def _rows(params, order_src, order_dst):
    """concat over gates of [W_g R_g] as [G*H, I_l + H], gates reordered."""
    stacked = np.concatenate([params.W, params.R], axis=2)  # [G, H, I_l + H]
    return reorder(stacked, order_src, order_dst).reshape(-1, stacked.shape[2])


def write_layer(spec: RNNSpec, prefix: str, layer: int, direction: int, p: LayerParams, slot: bool = False,
                legacy: bool = False) -> Dict[str, np.ndarray]:
    if not spec.cudnn_computes:
        raise UnsupportedError(f"a {spec.describe()} has no tf.contrib.cudnn_rnn cell (those compute cuDNN's cells: "
                               "reset-after GRU, tanh); use --style keras")
    scope = cell_scope(prefix, spec, layer, direction, legacy)
    if spec.mode == "lstm":
        out = {f"{scope}/kernel": _rows(p, CUDNN_LSTM, TF1_LSTM).T,
               f"{scope}/bias": reorder(bias_sum(p.b_W, p.b_R, slot), CUDNN_LSTM, TF1_LSTM).reshape(-1)}
        if legacy:
            out[f"{scope}/bias_cudnn_0"] = reorder(p.b_W, CUDNN_LSTM, TF1_LSTM).reshape(-1)
            out[f"{scope}/bias_cudnn_1"] = reorder(p.b_R, CUDNN_LSTM, TF1_LSTM).reshape(-1)
        if spec.num_proj:
            assert p.P is not None  # a stack with a projection has its matrix
            out[f"{scope}/projection/kernel"] = p.P.T
        return out
    if spec.is_rnn:
        return {f"{scope}/kernel": _rows(p, "h", "h").T, f"{scope}/bias": bias_sum(p.b_W, p.b_R, slot).reshape(-1)}
    return {f"{scope}/gates/kernel": _rows(p, CUDNN_GRU, "rz").T,
            f"{scope}/gates/bias": bias_sum(p.b_W[:2], p.b_R[:2], slot).reshape(-1),
            f"{scope}/candidate/input_projection/kernel": p.W[2].T,
            f"{scope}/candidate/input_projection/bias": p.b_W[2],
            f"{scope}/candidate/hidden_projection/kernel": p.R[2].T,
            f"{scope}/candidate/hidden_projection/bias": p.b_R[2]}


def write(canon: CanonicalRNN, prefix: str, slot: bool = False, legacy: bool = False) -> Dict[str, np.ndarray]:
    return write_all(partial(write_layer, legacy=legacy), canon, prefix, slot)


def read(tensors: Dict[str, np.ndarray], prefix: str, spec: RNNSpec, legacy: bool = False) -> CanonicalRNN:
    H, S, layers = spec.num_units, spec.state_size, []
    for p in range(spec.num_pseudo_layers):
        layer, direction = divmod(p, spec.num_dirs)
        scope, width = cell_scope(prefix, spec, layer, direction, legacy), spec.layer_input_size(layer)
        proj = np.asarray(tensors[f"{scope}/projection/kernel"]).T if spec.num_proj else None
        if spec.mode == "lstm":
            rows = reorder(np.asarray(tensors[f"{scope}/kernel"]).T.reshape(4, H, width + S), TF1_LSTM, CUDNN_LSTM)
            if legacy and f"{scope}/bias_cudnn_0" in tensors:
                b_W, b_R = (reorder(np.asarray(tensors[f"{scope}/bias_cudnn_{j}"]).reshape(4, H), TF1_LSTM,
                                    CUDNN_LSTM) for j in (0, 1))
            else:
                b_W = reorder(np.asarray(tensors[f"{scope}/bias"]).reshape(4, H), TF1_LSTM, CUDNN_LSTM)
                b_R = np.zeros_like(b_W)
        elif spec.is_rnn:
            rows = np.asarray(tensors[f"{scope}/kernel"]).T.reshape(1, H, width + H)
            b_W = np.asarray(tensors[f"{scope}/bias"]).reshape(1, H)
            b_R = np.zeros_like(b_W)
        else:
            gates = np.asarray(tensors[f"{scope}/gates/kernel"]).T.reshape(2, H, width + H)
            cand = np.concatenate([np.asarray(tensors[f"{scope}/candidate/input_projection/kernel"]).T,
                                   np.asarray(tensors[f"{scope}/candidate/hidden_projection/kernel"]).T], axis=1)
            rows = np.concatenate([gates, cand[None]], axis=0)
            gate_bias = np.asarray(tensors[f"{scope}/gates/bias"]).reshape(2, H)
            b_W = np.concatenate([gate_bias, np.asarray(tensors[f"{scope}/candidate/input_projection/bias"])[None]])
            b_R = np.concatenate([np.zeros_like(gate_bias),
                                  np.asarray(tensors[f"{scope}/candidate/hidden_projection/bias"])[None]])
        layers.append(LayerParams(W=rows[:, :, :width], R=rows[:, :, width:], b_W=b_W, b_R=b_R, P=proj))
    return CanonicalRNN(spec, layers)


_CELL_RE = re.compile(r"^(?:(rnn/)?multi_rnn_cell/cell_(\d+)"
                      r"|stack_bidirectional_rnn/cell_(\d+)/bidirectional_rnn/(fw|bw))"
                      r"/(cudnn_compatible_lstm_cell/kernel|cudnn_compatible_gru_cell/gates/kernel|lstm_cell/kernel)$")


def detect(shapes: Dict[str, Sequence[int]], prefix: str) -> Optional[RNNSpec]:
    """The spec of the TF1 canonical tensors stored under ``prefix``, or None if there are none."""
    start = join(prefix, "")
    cells = {}
    for name, shape in shapes.items():
        m = _CELL_RE.match(name[len(start):]) if name.startswith(start) else None
        if m:
            layer = int(m.group(2) or m.group(3))
            projection = shapes.get(name[:-len("kernel")] + "projection/kernel", ()) if "lstm" in m.group(5) else ()
            cells[(layer, m.group(4) or "fw")] = ("lstm" if "lstm" in m.group(5) else "gru", tuple(shape),
                                                  int(projection[-1]) if len(projection) == 2 else 0)
    if not cells or 0 not in {layer for layer, _ in cells}:
        return None
    mode, (rows, cols), P = cells[(0, "fw")] if (0, "fw") in cells else next(iter(cells.values()))
    H = cols // (4 if mode == "lstm" else 2)
    try:
        return RNNSpec(mode, 1 + max(layer for layer, _ in cells), H, rows - (P or H),
                       any(d == "bw" for _, d in cells), num_proj=P)
    except CudnnPortError:  # shapes that no cuDNN stack has: not canonical tensors of a buffer
        return None


def uses_legacy_names(shapes: Dict[str, Sequence[int]], prefix: str) -> bool:
    """Whether the checkpoint holds unidirectional cells under the older ``{prefix}/multi_rnn_cell/`` names."""
    start = join(prefix, "multi_rnn_cell/cell_0/")
    return any(name.startswith(start) for name in shapes)


LEGACY = SimpleNamespace(__name__=__name__ + ".LEGACY", scheme="legacy", detect=detect,
                         write_layer=partial(write_layer, legacy=True), write=partial(write, legacy=True),
                         read=partial(read, legacy=True))


def variant(shapes: Dict[str, Sequence[int]], prefix: str) -> Union[ModuleType, SimpleNamespace]:
    """The naming scheme a checkpoint already uses for ``prefix``: :data:`LEGACY` or this module itself."""
    return LEGACY if uses_legacy_names(shapes, prefix) else sys.modules[__name__]
