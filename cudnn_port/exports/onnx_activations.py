"""The activation functions of ONNX's ``LSTM`` / ``GRU`` / ``RNN`` nodes: read from a node (:func:`functions`, in
the operator spec's names, case-blind as onnxruntime reads them, with the spec's alpha / beta defaults), and each
written in plain ONNX ops (:func:`activation`) for the Scan form of a node (:mod:`.onnx_scan`): the spec's functions,
and Keras' own functions (:data:`OWN_FUNCTIONS`) that only cudnn-port's writer names on a node."""
from typing import TYPE_CHECKING, Callable, List, Tuple

import numpy as np

if TYPE_CHECKING:
    import onnx

_ALPHA = {"Affine": 1.0, "LeakyRelu": 0.01, "ThresholdedRelu": 1.0, "ScaledTanh": 1.0, "HardSigmoid": 0.2, "Elu": 1.0}
_BETA = {"Affine": 0.0, "ScaledTanh": 1.0, "HardSigmoid": 0.5}
# names ONNX's sequence ops do not define, which only cudnn-port's writer puts on a node (Keras' functions of those
# names, exports.onnx_portable.ONNX_FUNCTIONS): such a node is always expanded (.onnx_scan), never left for a runtime
OWN_FUNCTIONS = ("Silu", "Gelu", "Selu", "Relu6", "Exp", "Mish", "HardSwish", "LogSigmoid", "TanhShrink", "HardTanh",
                 "HardShrink", "SoftShrink", "SparsePlus", "Squareplus", "Softmax", "LogSoftmax", "Sparsemax")
_CANONICAL = {name.lower(): name for name in ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu",
                                               "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus")
             + OWN_FUNCTIONS}
DEFAULT_FUNCTIONS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


def functions(node: "onnx.NodeProto") -> List[Tuple[str, float, float]]:
    """The node's activations, all directions, each as (name, alpha, beta): ``activation_alpha`` and
    ``activation_beta`` are consumed in order by the functions that take them (the spec's defaults otherwise)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    dirs = 2 if attrs.get("direction", b"forward") == b"bidirectional" else 1
    names = [n.decode() if isinstance(n, bytes) else n for n in attrs.get("activations", [])]
    names = [_CANONICAL.get(n.lower(), n) for n in names]
    names = names or DEFAULT_FUNCTIONS[node.op_type] * dirs
    alphas, betas = list(attrs.get("activation_alpha", [])), list(attrs.get("activation_beta", []))
    out = []
    for name in names:
        alpha = alphas.pop(0) if name in _ALPHA and alphas else _ALPHA.get(name, 0.0)
        beta = betas.pop(0) if name in _BETA and betas else _BETA.get(name, 0.0)
        out.append((name, float(alpha), float(beta)))
    return out


def activation(fn: Tuple[str, float, float], v: str, name: str, n: Callable, const: Callable, width: int) -> str:
    """The output of ``fn`` (name, alpha, beta: one of :func:`functions`) applied to ``v`` (one gate's block,
    ``[B, width]``), as the node ``name``; ``n(op_type, inputs, name, **attributes)`` and ``const(name, value)`` add a
    node to the graph being built and return its output's name."""
    kind, alpha, beta = fn
    if kind == "Affine":
        return n("Add", [n("Mul", [v, const(f"{name}_alpha", alpha)], f"{name}_scaled"),
                         const(f"{name}_beta", beta)], name)
    if kind == "ScaledTanh":
        return n("Mul", [n("Tanh", [n("Mul", [v, const(f"{name}_beta", beta)], f"{name}_in")], f"{name}_tanh"),
                         const(f"{name}_alpha", alpha)], name)
    if kind == "Softsign":  # x / (1 + |x|): OpenVINO 2024.6's Softsign in a Scan body after an Add computes
        # something else (errors of 1.8 on outputs of magnitude 0.9, measured; 2026.4's is right)
        return n("Div", [v, n("Add", [n("Abs", [v], f"{name}_abs"), const(f"{name}_one", 1.0)], f"{name}_den")],
                 name)
    if kind in OWN_FUNCTIONS:
        return _own(kind, v, name, n, const, width)
    kw = {"alpha": alpha} if kind in _ALPHA else {}
    kw.update({"beta": beta} if kind in _BETA else {})
    return n(kind, [v], name, **kw)


def _own(kind, v, name, n, const, width):
    """Keras' function ``kind`` (:data:`OWN_FUNCTIONS`) of ``v`` (one gate's block, ``[B, width]``) in plain ONNX ops
    (Keras' constants: selu's alpha and scale; gelu exact, through Erf; softmax, log_softmax and sparsemax over the
    block's last axis, tf_loop.PER_BLOCK)."""
    def clip(low, high, out=name):
        return n("Clip", [v, const(f"{name}_low", low), const(f"{name}_high", high)], out)

    def times(u):
        return n("Mul", [v, u], name)

    def softplus(u, tag):
        return n("Softplus", [u], f"{name}_{tag}")

    if kind == "Silu":
        return times(n("Sigmoid", [v], f"{name}_sigmoid"))
    if kind == "Gelu":  # x * (1 + erf(x / sqrt 2)) / 2
        erf = n("Erf", [n("Mul", [v, const(f"{name}_rsqrt2", 1.0 / np.sqrt(2.0))], f"{name}_scaled")], f"{name}_erf")
        return times(n("Mul", [n("Add", [erf, const(f"{name}_one", 1.0)], f"{name}_1erf"),
                               const(f"{name}_half", 0.5)], f"{name}_half_1erf"))
    if kind == "Selu":
        alpha, scale = 1.67326324, 1.05070098  # Keras' selu: scale * elu(x, alpha)
        return n("Selu", [v], name, alpha=alpha, gamma=scale)
    if kind == "Relu6":
        return clip(0.0, 6.0)
    if kind == "HardTanh":
        return clip(-1.0, 1.0)
    if kind == "Exp":
        return n("Exp", [v], name)
    if kind == "Mish":
        return times(n("Tanh", [softplus(v, "softplus")], f"{name}_tanh"))
    if kind == "HardSwish":  # x * relu6(x + 3) / 6
        return times(n("HardSigmoid", [v], f"{name}_hs", alpha=1.0 / 6.0, beta=0.5))
    if kind == "LogSigmoid":  # -softplus(-x)
        return n("Neg", [softplus(n("Neg", [v], f"{name}_neg"), "softplus")], name)
    if kind == "TanhShrink":
        return n("Sub", [v, n("Tanh", [v], f"{name}_tanh")], name)
    if kind == "HardShrink":  # x where |x| > 0.5, else 0
        keep = n("Greater", [n("Abs", [v], f"{name}_abs"), const(f"{name}_half", 0.5)], f"{name}_keep")
        return times(n("Cast", [keep], f"{name}_keep_float", to=1))
    if kind == "SoftShrink":  # x - clip(x, -0.5, 0.5)
        return n("Sub", [v, clip(-0.5, 0.5, f"{name}_clip")], name)
    if kind == "SparsePlus":  # (clip(x, -1, 1) + 1)^2 / 4 + relu(x - 1)
        one = const(f"{name}_one", 1.0)
        shifted = n("Add", [clip(-1.0, 1.0, f"{name}_clip"), one], f"{name}_shifted")
        square = n("Mul", [n("Mul", [shifted, shifted], f"{name}_sq"), const(f"{name}_quarter", 0.25)],
                   f"{name}_quarter_sq")
        return n("Add", [square, n("Relu", [n("Sub", [v, one], f"{name}_minus_1")], f"{name}_above")], name)
    if kind == "Squareplus":  # (x + sqrt(x^2 + 4)) / 2
        root = n("Sqrt", [n("Add", [n("Mul", [v, v], f"{name}_sq"), const(f"{name}_four", 4.0)], f"{name}_plus_4")],
                 f"{name}_sqrt")
        return n("Mul", [n("Add", [v, root], f"{name}_sum"), const(f"{name}_half", 0.5)], name)
    if kind in ("Softmax", "LogSoftmax"):
        return n(kind, [v], name, axis=1)
    if kind == "Sparsemax":
        return _sparsemax(v, name, n, const, width)
    raise ValueError(f"activation {kind!r} has no Scan form here")


def _sparsemax(v, name, n, const, width):
    """Keras 3's sparsemax over the last axis of ``v`` ``[B, width]`` (reference._sparsemax: its threshold is
    Keras')."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import numpy_helper

    def ints(tag, value):
        return n("Constant", [], f"{name}_{tag}", value=numpy_helper.from_array(np.asarray(value, np.int64)))

    ranked = n("TopK", [v, ints("k", [width])], f"{name}_ranked", extra=(f"{name}_order",), axis=1, largest=1,
               sorted=1)
    running = n("CumSum", [ranked, ints("axis", 1)], f"{name}_running")
    excess = n("Div", [n("Sub", [running, const(f"{name}_one", 1.0)], f"{name}_less_1"),
                       const(f"{name}_ranks", np.arange(1, width + 1))], f"{name}_excess")
    support = n("Greater", [n("Sub", [ranked, excess], f"{name}_gap"), const(f"{name}_zero", 0.0)], f"{name}_support")
    axes = ints("axes", [1])
    total = n("ReduceSum", [n("Where", [support, running, const(f"{name}_zero_w", 0.0)], f"{name}_kept"), axes],
              f"{name}_total", keepdims=1)
    size = n("ReduceSum", [n("Cast", [support], f"{name}_support_f", to=1), axes], f"{name}_size", keepdims=1)
    tau = n("Div", [n("Sub", [total, const(f"{name}_one_t", 1.0)], f"{name}_total_1"), size], f"{name}_tau")
    return n("Relu", [n("Sub", [v, tau], f"{name}_shifted")], name)
