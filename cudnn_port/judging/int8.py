"""The judge of int8 ONNX models (:mod:`cudnn_port.exports.quantize`), for ``verify``.

Its tolerance scales with what int8 itself costs on the case at hand: ``ideal_int8_forward`` is the float64
reference rounding weights and activations exactly as an int8 implementation does; an int8 artifact's error
against the float64 reference on the source weights may be at most ``K_MAX`` (3) times that rounding error's max
and ``K_MEAN`` (1.5) times its mean, plus small floors; its outputs past each length must be zero; and every int8
weight must dequantize to within half a step of the source weight (a step no coarser than 7 bits of its row).
Measured: correct exports reach at most 0.72 of either limit over 108 small stacks and the benchmark, char LM and
tagger stacks; wrong weights, a swapped gate, a zeroed bias, a dropped ``sequence_lens`` or ``initial_c`` exceed
them 2-100x.
"""
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from ..exports import OUTPUT_NAMES
from ..exports.quantize import LSTM_SETTINGS
from ..canonical import CanonicalRNN, LayerParams
from ..exports.onnx import layer_weights
from ..formats import artifacts, derived_keys
from ..formats.jobs import open_artifact
from ..layout import own_activation
from .parity import failed_row

if TYPE_CHECKING:
    from ..canonical import CanonicalRNN
    from ..layout import RNNSpec
    import onnx

K_MAX, K_MEAN, FLOOR_MAX, FLOOR_MEAN = 3.0, 1.5, 1e-4, 1e-5


def _round_like_int8(a, per_channel, reduce_range):
    """Symmetric int8 rounding of one direction's weights ``[G, H, I]`` as onnxruntime does it: one scale per
    direction, or per (gate, unit) row; range +-127, or +-64 with reduce_range."""
    qmax = 64.0 if reduce_range else 127.0
    amax = np.abs(a).max(axis=-1, keepdims=True) if per_channel else np.abs(a).max()
    scale = np.where(amax > 0, amax / qmax, 1.0)
    return np.clip(np.round(a / scale), -qmax, qmax) * scale


def rounded_canon(canon: "CanonicalRNN", per_channel: bool = False, reduce_range: bool = False) -> "CanonicalRNN":
    """``canon`` with W and R rounded as the int8 model rounds them (biases unchanged): the reference on it gives
    the error of weight rounding alone, the scale of :func:`judge_int8`'s tolerance."""
    layers = [LayerParams(_round_like_int8(np.asarray(p.W, np.float64), per_channel, reduce_range),
                          _round_like_int8(np.asarray(p.R, np.float64), per_channel, reduce_range),
                          p.b_W, p.b_R) for p in canon.layers]
    return CanonicalRNN(canon.spec, layers)


def _round_uint8(a):
    """Dynamic asymmetric uint8 rounding of a whole tensor, as onnxruntime quantizes a GEMM's float operand."""
    lo, hi = min(float(a.min()), 0.0), max(float(a.max()), 0.0)
    scale = (hi - lo) / 255.0
    if scale == 0.0:
        return a
    zero = np.round(-lo / scale)
    return (np.clip(np.round(a / scale) + zero, 0, 255) - zero) * scale


def quantized(spec: "RNNSpec") -> bool:
    """Whether int8 quantizes a stack of ``spec`` (this judge's own statement of it): onnxruntime has int8 kernels for
    fused LSTM nodes only; ONNX has no projected LSTM; and a cell of functions other than Sigmoid gates with a Tanh,
    Relu or Sigmoid cell is a Scan loop (OpenVINO's fused nodes run no other), which stays float32."""
    return spec.mode == "lstm" and not spec.num_proj and spec.recurrent_activation == "sigmoid" and \
        spec.activation in ("tanh", "relu", "sigmoid")


def ideal_int8_forward(canon: "CanonicalRNN", x: np.ndarray, lengths: np.ndarray, h_0: np.ndarray,
                       c_0: np.ndarray, per_channel: bool = False,
                       reduce_range: bool = False) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """An LSTM stack in float64 that rounds as an exact int8 implementation would: weights as the int8 model
    stores them (:func:`rounded_canon`), each GEMM's activation operand to uint8 on the fly (a layer's whole input
    for the input projection, the batch's h at each step for the recurrent one), nothing else. Its distance from
    the reference is the error int8 itself causes, the scale of :func:`judge_int8`'s tolerance. Returns
    (outputs, h_n, c_n) like :func:`cudnn_port.reference.forward`."""
    def sigmoid(v):
        return 1.0 / (1.0 + np.exp(-v))

    spec, rounded = canon.spec, rounded_canon(canon, per_channel, reduce_range)
    if not quantized(spec):  # its gates or its cell are no fused LSTM's: not what this model computes
        raise ValueError(f"int8 quantizes no {spec.cell_name}")
    # the cell's function; int8 has fused LSTM nodes only, whose gates are sigmoid (other cells are Scan loops)
    functions: Dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "tanh": np.tanh, "relu": lambda v: np.maximum(v, 0.0), "sigmoid": sigmoid}
    act = functions[spec.activation or own_activation(spec.mode)]  # RNNSpec has filled in its mode's own already
    x = np.asarray(x, np.float64)
    B, T, _ = x.shape
    H, D = spec.num_units, spec.num_dirs
    lengths = np.asarray(lengths)
    h_0, c_0 = np.asarray(h_0, np.float64), np.asarray(c_0, np.float64)
    h_n, c_n = np.zeros_like(h_0), np.zeros_like(h_0)
    layer_in = x
    for layer in range(spec.num_layers):
        layer_out = np.zeros((B, T, D * H))
        x_q = _round_uint8(layer_in)
        for direction in range(D):
            p = layer * D + direction
            params = rounded.layers[p]
            W, R = np.asarray(params.W), np.asarray(params.R)  # [4, H, I], [4, H, H], cuDNN order i, f, c, o
            bias = np.asarray(params.b_W, np.float64) + np.asarray(params.b_R, np.float64)
            pre_x = np.einsum("bti,ghi->btgh", x_q, W) + bias
            h, c = h_0[p].copy(), c_0[p].copy()
            for t in (range(T) if direction == 0 else range(T - 1, -1, -1)):
                active = (t < lengths)[:, None]
                pre = pre_x[:, t] + np.einsum("bk,ghk->bgh", _round_uint8(h), R)
                c_new = sigmoid(pre[:, 1]) * c + sigmoid(pre[:, 0]) * act(pre[:, 2])
                h_new = sigmoid(pre[:, 3]) * act(c_new)
                h, c = np.where(active, h_new, h), np.where(active, c_new, c)
                layer_out[:, t, direction * H:(direction + 1) * H] = np.where(active, h_new, 0.0)
            h_n[p], c_n[p] = h, c
        layer_in = layer_out
    return layer_in, h_n, c_n


def check_int8_weights(model: "onnx.ModelProto", canon: "CanonicalRNN",
                       max_bits_lost: int = 1) -> Tuple[bool, Optional[float], str]:
    """Every DynamicQuantizeLSTM weight of ``model`` (ModelProto), taken in graph order as pseudo-layers 0..L*D-1
    (a node holds one direction or both), against ``canon``: dequantized within half a step of the source weight,
    the step at most ``2**max_bits_lost * amax / 127`` of its row. Returns (ok, worst normalised error, note)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import numpy_helper

    def directions(arrays):  # [D, ...] arrays -> one tuple per direction
        return [tuple(a[d:d + 1] for a in arrays) for d in range(arrays[0].shape[0])]

    inits = {i.name: i for i in model.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM"]
    # one node per layer (bidirectional nodes) or per layer and direction (the portable graph's forward nodes)
    got_nodes = [(node, d) for node in nodes for d in range(numpy_helper.to_array(inits[node.input[3]]).shape[0])]
    wanted = [w for layer in range(canon.spec.num_layers) for w in directions(layer_weights(canon, layer))]
    if len(got_nodes) != len(wanted):
        return False, None, f"{len(nodes)} DynamicQuantizeLSTM nodes for {canon.spec.num_layers} layers"
    worst = 0.0
    for pseudo, ((node, d), (W, R, B)) in enumerate(zip(got_nodes, wanted)):
        layer = f"{pseudo // canon.spec.num_dirs}" + (f" direction {pseudo % 2}" if canon.spec.num_dirs == 2 else "")
        B_got = numpy_helper.to_array(inits[node.input[3]])[d:d + 1]  # [1, 2*G*H]: b_W, b_R; their sum counts
        half = B.shape[1] // 2
        if B_got.shape != B.shape or not np.allclose(B_got[:, :half] + B_got[:, half:], B[:, :half] + B[:, half:],
                                                     rtol=1e-5, atol=1e-6):
            return False, None, f"layer {layer}: float32 bias (b_W + b_R) differs from the source"
        for label, want, (iq, iscale) in (("W", W, (1, 8)), ("R", R, (2, 10))):
            q = numpy_helper.to_array(inits[node.input[iq]]).astype(np.float64)[d:d + 1]  # [1, in, G*H]
            scale = numpy_helper.to_array(inits[node.input[iscale]]).astype(np.float64)[d:d + 1]  # [1] or [1, G*H]
            scale = scale[:, None, None] if scale.ndim == 1 else scale[:, None, :]
            got = (q * scale).transpose(0, 2, 1)  # -> [1, G*H, in], the float model's layout
            if got.shape != want.shape:
                return False, None, f"layer {layer} {label}: shape {list(got.shape)} vs {list(want.shape)}"
            step = np.broadcast_to(scale.transpose(0, 2, 1), got.shape)
            amax = np.abs(want).max(axis=(1, 2) if scale.shape[2] == 1 else 2, keepdims=True)
            if np.any(step > 2 ** max_bits_lost * np.maximum(amax, 1e-30) / 127 * (1 + 1e-5)):
                return False, None, f"layer {layer} {label}: quantization step coarser than 7 bits of the range"
            err = np.abs(got - want) / np.maximum(step, 1e-30)
            worst = max(worst, float(err.max()))
    ok = worst <= 0.5 + 1e-3
    return ok, worst, "" if ok else f"a weight is {worst:.2f} steps from the source (at most 0.5 when rounded)"


def infer_settings(model: "onnx.ModelProto") -> Dict[str, bool]:
    """The LSTM settings an int8 model was made with, read off its first DynamicQuantizeLSTM node: per channel when
    its W scale has one entry per row, reduce_range when no int8 weight exceeds 64 in magnitude."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    node = next((n for n in model.graph.node if n.op_type == "DynamicQuantizeLSTM"), None)
    if node is None:
        return dict(LSTM_SETTINGS)
    scale = numpy_helper.to_array(inits[node.input[8]])
    q = np.concatenate([numpy_helper.to_array(inits[node.input[i]]).ravel() for i in (1, 2)])
    return dict(per_channel=scale.ndim == 2, reduce_range=bool(np.abs(q.astype(np.int32)).max() <= 64))


def int8_rows(out: str, arts: Dict[str, str], spec: "RNNSpec", canon: "CanonicalRNN",
              fed: Dict[str, np.ndarray], want: List[Optional[np.ndarray]], plain: Dict[str, np.ndarray],
              want_zero: List[Optional[np.ndarray]]) -> List[Dict[str, Any]]:
    """verify's rows of a stack's int8 models (``arts``: its manifest artifacts): ``model_int8.onnx`` on ``plain``
    (inputs and lengths; ``want_zero`` from zero states), ``model_stateful_int8.onnx`` on ``fed`` (with states;
    ``want``)."""
    rows = []
    for key, of in derived_keys("int8").items():  # {"onnx_int8": "onnx", ...}, as the ONNX format declares them
        if key in arts:
            feeds, judge = (plain, want_zero) if artifacts()[of][1].states == "none" else (fed, want)
            rows.append(int8_row(f"{of} int8 (onnxruntime)", os.path.join(out, arts[key]), spec, canon, feeds, judge))
    return rows


def int8_row(label: str, path: str, spec: "RNNSpec", canon: "CanonicalRNN", feeds: Dict[str, np.ndarray],
             want: List[Optional[np.ndarray]]) -> Dict[str, Any]:
    """The verify row of the int8 model at ``path`` of stack ``canon``, run on ``feeds`` (verify's seeded ragged
    batch, with non-zero states or without states: zeros), against ``want`` (the float64 reference's outputs,
    final_h, final_c)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    import onnx

    try:
        if not quantized(spec):  # no int8 form exists (:func:`quantized`): a file here is not one this judge sizes
            raise ValueError(f"int8 quantizes no {spec.cell_name}; this file is not one cudnn-port writes")
        model = onnx.load(str(path))
        got = open_artifact("onnx", path, spec)(feeds).ordered(OUTPUT_NAMES)
    except Exception as e:  # an int8 model that fails to load or run is a failed check
        return failed_row(label, e)
    settings = dict(LSTM_SETTINGS, **infer_settings(model))
    # inputs and lengths in every batch verify feeds; the states where the model takes them
    x, lengths, h, c = feeds["inputs"], feeds["sequence_lengths"], feeds.get("initial_h"), feeds.get("initial_c")
    zeros = np.zeros((spec.num_pseudo_layers, x.shape[0], spec.num_units))
    rounded = ideal_int8_forward(canon, x, lengths, zeros if h is None else h, zeros if c is None else c, **settings)
    valid = np.arange(x.shape[1])[None, :] < np.asarray(lengths)[:, None]
    row: Dict[str, Any] = {"artifact": label, "passed": True, "max_rel": None, "outputs": {}}
    notes = []
    for name, g, w, r in zip(OUTPUT_NAMES, got, want, rounded):
        if w is None:
            continue
        g, w, r = (np.asarray(v, np.float64) for v in (g, w, r))
        if g.shape != w.shape:
            return dict(failed_row(label, ValueError(f"{name}: shape {list(g.shape)} vs {list(w.shape)}")))
        if name == "outputs":
            if np.any(g[~valid] != 0):
                row["passed"] = False
                notes.append("outputs past a sequence's length are not zero")
            g, w, r = g[valid], w[valid], r[valid]
        err, scale = np.abs(g - w), np.abs(r - w)
        limit_max, limit_mean = K_MAX * scale.max() + FLOOR_MAX, K_MEAN * scale.mean() + FLOOR_MEAN
        ok = bool(err.max() <= limit_max and err.mean() <= limit_mean)
        row["outputs"][name] = {"max_abs": float(err.max()), "mean_abs": float(err.mean()),
                                "limit_max": float(limit_max), "limit_mean": float(limit_mean), "passed": ok}
        if not ok:
            row["passed"] = False
            notes.append(f"{name}: error max {err.max():.1e} / mean {err.mean():.1e} over {limit_max:.1e} / "
                         f"{limit_mean:.1e}")
    row["max_abs"] = max(v["max_abs"] for v in row["outputs"].values())
    ok, worst, note = check_int8_weights(model, canon)
    row["weights_worst_steps"] = worst
    if not ok:
        row["passed"] = False
        notes.append(note)
    limits = row["outputs"]["outputs"]
    row["note"] = "; ".join(notes) or (f"int8 tolerance: max <= {limits['limit_max']:.1e}, mean <= "
                                       f"{limits['limit_mean']:.1e} (3x / 1.5x exact int8 rounding); weights "
                                       f"within {worst:.2f} of a step")
    return row
