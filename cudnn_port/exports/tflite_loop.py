"""One layer direction of any cell as a TFLite ``WHILE`` loop of builtin ops, for :mod:`cudnn_port.exports.tflite`:
the GRU (TFLite has no GRU op), and an LSTM or plain RNN whose functions TFLite's fused ops do not apply
(Keras' ``recurrent_activation="hard_sigmoid"``, ``LSTM(activation="sigmoid")``, ``SimpleRNN(activation="elu")``).
Gates in cuDNN order (docs/conventions.md, section 2); cuDNN's reset-after GRU, gates r, z, h::

    xw = FULLY_CONNECTED(x, W, input_bias)                           [B, T, G*H], once for every step
    WHILE t < T (loop variables t, T, h, y, xw, valid, and c for an LSTM):
        x_r, x_z, x_h = SPLIT(xw[:, t])      h_r, h_z, h_h = SPLIT(FULLY_CONNECTED(h, R, [0, 0, b_R_h]))
        r = LOGISTIC(x_r + h_r)   z = LOGISTIC(x_z + h_z)   n = TANH(x_h + r * h_h)   h' = n + z * (h - n)
        h = SELECT_V2(valid[:, t], h', h)    y[:, t] = SELECT_V2(valid[:, t], h', 0)   (DYNAMIC_UPDATE_SLICE)

The reset-before GRU (Keras' ``reset_after=False``): h_r, h_z = SPLIT(FULLY_CONNECTED(h, R_rz)), and
n = TANH(x_h + FULLY_CONNECTED(r * h, R_h)), its b_R_h in the input bias. LSTM: i, f, c~, o = SPLIT(xw[:, t] +
FULLY_CONNECTED(h, R)), c' = f * c + i * TANH(c~), h' = o * TANH(c') (times P with a projection), c kept past a
length as h is. Plain RNN: h' = TANH(xw[:, t] + FULLY_CONNECTED(h, R)). Another activation or gate function
(RNNSpec.activation, recurrent_activation) in place of TANH / LOGISTIC: builtin ops of Keras' definition
(:data:`FUNCTIONS`).
"""
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import numpy as np

from ..canonical import input_bias

if TYPE_CHECKING:
    from ..canonical import CanonicalRNN

LOOP: Tuple[Tuple[str, str, List[int]], ...] = (
    ("t", "int32", []), ("T", "int32", []), ("h", "float32", [-1, -1]), ("y", "float32", [-1, -1, -1]),
    ("xw", "float32", [-1, -1, -1]), ("valid", "bool", [-1, -1, 1]))
C = ("c", "float32", [-1, -1])  # an LSTM's seventh loop variable


def _relu6_over_6(b, v, n):  # Keras' hard_sigmoid: relu6(x + 3) / 6
    three, six = b.const(f"{n}/three", np.float32(3)), b.const(f"{n}/six", np.float32(6))
    shifted = b.op("RELU6", [b.op("ADD", [v, three], f"{n}/plus_3", options="AddOptions")], f"{n}/relu6")
    return b.op("DIV", [shifted, six], n, options="DivOptions")


def _softsign(b, v, n):  # x / (1 + |x|)
    one = b.const(f"{n}/one", np.float32(1))
    return b.op("DIV", [v, b.op("ADD", [b.op("ABS", [v], f"{n}/abs"), one], f"{n}/den", options="AddOptions")], n,
                options="DivOptions")


def _softplus(b, v, n):  # max(x, 0) + log(1 + exp(-|x|)): no overflow
    one = b.const(f"{n}/one", np.float32(1))
    tail = b.op("EXP", [b.op("NEG", [b.op("ABS", [v], f"{n}/abs")], f"{n}/neg")], f"{n}/exp")
    log = b.op("LOG", [b.op("ADD", [tail, one], f"{n}/one_plus", options="AddOptions")], f"{n}/log")
    return b.op("ADD", [b.op("RELU", [v], f"{n}/relu"), log], n, options="AddOptions")


def _times(b, v, u, n):  # v * u
    return b.op("MUL", [v, u], n, options="MulOptions")


def _selu(b, v, n):  # scale * (relu(x) + alpha * (exp(min(x, 0)) - 1)), Keras' alpha and scale
    zero = b.const(f"{n}/zero", np.float32(0))
    alpha, scale = b.const(f"{n}/alpha", np.float32(1.67326324)), b.const(f"{n}/scale", np.float32(1.05070098))
    negative = b.op("ELU", [b.op("MINIMUM", [v, zero], f"{n}/min")], f"{n}/elu")
    total = b.op("ADD", [b.op("RELU", [v], f"{n}/relu"), _times(b, alpha, negative, f"{n}/neg")], f"{n}/sum",
                 options="AddOptions")
    return _times(b, scale, total, n)


def _negated(b, v, n):
    return b.op("NEG", [v], n)


def _plus(b, v, u, n):
    return b.op("ADD", [v, u], n, options="AddOptions")


def _hard_shrink(b, v, n):  # x where |x| > 0.5, else 0
    half = b.const(f"{n}/half", np.float32(0.5))
    keep = b.op("GREATER", [b.op("ABS", [v], f"{n}/abs"), half], f"{n}/keep", dtype="bool")
    return _times(b, v, b.op("CAST", [keep], f"{n}/keep_float"), n)


def _clipped(b, v, low, high, n):
    lo, hi = b.const(f"{n}/low", np.float32(low)), b.const(f"{n}/high", np.float32(high))
    return b.op("MINIMUM", [b.op("MAXIMUM", [v, lo], f"{n}/max"), hi], n)


def _soft_shrink(b, v, n):  # x - clip(x, -0.5, 0.5)
    return b.op("SUB", [v, _clipped(b, v, -0.5, 0.5, f"{n}/clip")], n, options="SubOptions")


def _sparse_plus(b, v, n):  # (clip(x, -1, 1) + 1)^2 / 4 + relu(x - 1)
    one, quarter = b.const(f"{n}/one", np.float32(1)), b.const(f"{n}/quarter", np.float32(0.25))
    shifted = _plus(b, b.op("RELU_N1_TO_1", [v], f"{n}/clip"), one, f"{n}/shifted")
    square = _times(b, _times(b, shifted, shifted, f"{n}/square"), quarter, f"{n}/quarter_square")
    above = b.op("RELU", [b.op("SUB", [v, one], f"{n}/minus_1", options="SubOptions")], f"{n}/above")
    return _plus(b, square, above, n)


def _sparse_sigmoid(b, v, n):  # (clip(x, -1, 1) + 1) / 2
    one, half = b.const(f"{n}/one", np.float32(1)), b.const(f"{n}/half", np.float32(0.5))
    return _times(b, _plus(b, b.op("RELU_N1_TO_1", [v], f"{n}/clip"), one, f"{n}/shifted"), half, n)


def _squareplus(b, v, n):  # (x + sqrt(x^2 + 4)) / 2
    four, half = b.const(f"{n}/four", np.float32(4)), b.const(f"{n}/half", np.float32(0.5))
    root = b.op("SQRT", [_plus(b, _times(b, v, v, f"{n}/square"), four, f"{n}/plus_4")], f"{n}/sqrt")
    return _times(b, _plus(b, v, root, f"{n}/sum"), half, n)


def _sparsemax(b, v, n):  # Keras 3's, over the last axis (reference._sparsemax: its threshold is Keras')
    i32 = lambda tag, value: b.const(f"{n}/{tag}", np.asarray(value, np.int32))
    width = b.op("GATHER", [b.op("SHAPE", [v], f"{n}/shape", dtype="int32", options="ShapeOptions", outType=2),
                            i32("last", 1)], f"{n}/width", dtype="int32", options="GatherOptions", axis=0)
    ranked, _ = b.op("TOPK_V2", [v, width], [f"{n}/ranked", b.tensor(f"{n}/order", "int32")])
    running = b.op("CUMSUM", [ranked, i32("axis", 1)], f"{n}/running", options="CumsumOptions")
    end = b.op("ADD", [width, i32("one_j", 1)], f"{n}/end", dtype="int32", options="AddOptions")
    ranks = b.op("CAST", [b.op("RANGE", [i32("one_i", 1), end, i32("step", 1)], f"{n}/ranks_i", dtype="int32")],
                 f"{n}/ranks")
    one, zero = b.const(f"{n}/one", np.float32(1)), b.const(f"{n}/zero", np.float32(0))
    excess = b.op("DIV", [b.op("SUB", [running, one], f"{n}/less_1", options="SubOptions"), ranks], f"{n}/excess",
                  options="DivOptions")
    support = b.op("GREATER", [b.op("SUB", [ranked, excess], f"{n}/gap", options="SubOptions"), zero],
                   f"{n}/support", dtype="bool")
    total = b.op("SUM", [b.op("SELECT_V2", [support, running, zero], f"{n}/kept"), i32("axes", [1])], f"{n}/total",
                 options="ReducerOptions", keepDims=True)
    size = b.op("SUM", [b.op("CAST", [support], f"{n}/support_f"), i32("axes_k", [1])], f"{n}/size",
                options="ReducerOptions", keepDims=True)
    tau = b.op("DIV", [b.op("SUB", [total, one], f"{n}/total_1", options="SubOptions"), size], f"{n}/tau",
               options="DivOptions")
    return b.op("RELU", [b.op("SUB", [v, tau], f"{n}/shifted", options="SubOptions")], n)


# a cell's functions (RNNSpec.activation, recurrent_activation) in builtin ops: (graph, tensor, name) -> tensor;
# the loop applies each to one gate's block [B, H] at a time, so those over the last axis (tf_loop.PER_BLOCK) are exact
FUNCTIONS = {"tanh": lambda b, v, n: b.op("TANH", [v], n), "relu": lambda b, v, n: b.op("RELU", [v], n),
             "sigmoid": lambda b, v, n: b.op("LOGISTIC", [v], n), "elu": lambda b, v, n: b.op("ELU", [v], n),
             "linear": lambda b, v, n: v, "hard_sigmoid": _relu6_over_6, "softsign": _softsign,
             "softplus": _softplus,
             "silu": lambda b, v, n: _times(b, v, b.op("LOGISTIC", [v], f"{n}/sigmoid"), n),
             "gelu": lambda b, v, n: b.op("GELU", [v], n, options="GeluOptions", approximate=False),
             "selu": _selu, "relu6": lambda b, v, n: b.op("RELU6", [v], n),
             "leaky_relu": lambda b, v, n: b.op("LEAKY_RELU", [v], n, options="LeakyReluOptions", alpha=0.2),
             "exponential": lambda b, v, n: b.op("EXP", [v], n),
             "mish": lambda b, v, n: _times(b, v, b.op("TANH", [_softplus(b, v, f"{n}/softplus")], f"{n}/tanh"), n),
             "hard_silu": lambda b, v, n: b.op("HARD_SWISH", [v], n),  # x * relu6(x + 3) / 6
             "log_sigmoid": lambda b, v, n: _negated(b, _softplus(b, _negated(b, v, f"{n}/neg_in"), f"{n}/sp"), n),
             "tanh_shrink": lambda b, v, n: b.op("SUB", [v, b.op("TANH", [v], f"{n}/tanh")], n, options="SubOptions"),
             "hard_tanh": lambda b, v, n: b.op("RELU_N1_TO_1", [v], n),
             "celu": lambda b, v, n: b.op("ELU", [v], n),  # celu with Keras' alpha 1 is elu
             "hard_shrink": _hard_shrink, "soft_shrink": _soft_shrink, "sparse_plus": _sparse_plus,
             "sparse_sigmoid": _sparse_sigmoid, "squareplus": _squareplus,
             "softmax": lambda b, v, n: b.op("SOFTMAX", [v], n, options="SoftmaxOptions", beta=1.0),
             "log_softmax": lambda b, v, n: b.op("LOG_SOFTMAX", [v], n, options="LogSoftmaxOptions"),
             "sparsemax": _sparsemax}


def _loop_inputs(g, prefix, lstm):
    g.inputs = [g.tensor(f"{prefix}{name}", dtype, shape) for name, dtype, shape in LOOP + (C,) * lstm]
    return g.inputs


def _cond(graph, lstm):
    """The loop condition t < T, one subgraph shared by every loop of the model with as many loop variables."""
    key = "loop_cond_c" if lstm else "loop_cond"
    if getattr(graph, key, None) is None:
        c = graph.model.subgraph(key)
        t, T = _loop_inputs(c, f"{key}/", lstm)[:2]
        c.outputs = [c.op("LESS", [t, T], f"{key}/more", dtype="bool")]
        setattr(graph, key, len(graph.model.subgraphs) - 1)
    return getattr(graph, key)


def _body(graph, spec, params, name):
    H, mode, lstm = spec.num_units, spec.mode, spec.mode == "lstm"
    b = graph.model.subgraph(f"{name}/body")
    t, T, h, y, xw, valid, *c = _loop_inputs(b, f"{name}/", lstm)
    i32 = lambda n, v: b.const(f"{name}/{n}", np.asarray(v, np.int32))
    act, gate = FUNCTIONS[spec.activation], FUNCTIONS[spec.recurrent_activation]  # the cell's function, the gates'
    add = lambda u, v, n: b.op("ADD", [u, v], f"{name}/{n}", options="AddOptions")
    mul = lambda u, v, n: b.op("MUL", [u, v], f"{name}/{n}", options="MulOptions")
    fc = lambda u, w, bias, n: b.op("FULLY_CONNECTED", [u, w, bias], f"{name}/{n}", options="FullyConnectedOptions")
    xw_t = b.op("GATHER", [xw, t], f"{name}/xw_t", options="GatherOptions", axis=1)
    axis = i32("axis_1", 1)
    c_new = None
    if mode == "gru":
        gates = 3 if spec.reset_after else 2  # reset before: r and z from h, the candidate's product after r
        R = np.concatenate([np.asarray(params.R[k], np.float32) for k in range(gates)])
        bias_h = np.concatenate([np.zeros(2 * H, np.float32)] + [np.asarray(params.b_R[2], np.float32)] *
                                spec.reset_after)
        hw = fc(h, b.const(f"{name}/R", R), b.const(f"{name}/b_R_h", bias_h), "hw")
        x_r, x_z, x_h = b.op("SPLIT", [axis, xw_t], [f"{name}/x_{k}" for k in "rzh"], options="SplitOptions",
                             numSplits=3)
        parts = b.op("SPLIT", [axis, hw], [f"{name}/h_{k}" for k in "rzh"[:gates]], options="SplitOptions",
                     numSplits=gates)
        r = gate(b, add(x_r, parts[0], "r_pre"), f"{name}/r")
        z = gate(b, add(x_z, parts[1], "z_pre"), f"{name}/z")
        if spec.reset_after:
            n = act(b, add(x_h, mul(r, parts[2], "r_h"), "n_pre"), f"{name}/n")
        else:
            R_h = b.const(f"{name}/R_h", np.asarray(params.R[2], np.float32))
            n = act(b, add(x_h, fc(mul(r, h, "r_times_h"), R_h, -1, "h_h"), "n_pre"), f"{name}/n")
        h_new = add(n, mul(z, b.op("SUB", [h, n], f"{name}/h_minus_n", options="SubOptions"), "z_h"), "h_new")
    else:
        R = np.concatenate([np.asarray(params.R[k], np.float32) for k in range(spec.num_gates)])
        pre = add(xw_t, fc(h, b.const(f"{name}/R", R), -1, "hw"), "pre")
        if lstm:  # cuDNN's order: i, f, c~, o
            i, f, cand, o = b.op("SPLIT", [axis, pre], [f"{name}/pre_{k}" for k in "ifco"], options="SplitOptions",
                                 numSplits=4)
            i, f, o = (gate(b, v, f"{name}/{k}") for v, k in ((i, "i"), (f, "f"), (o, "o")))
            c_new = add(mul(f, c[0], "f_c"), mul(i, act(b, cand, f"{name}/cand"), "i_cand"), "c_new")
            h_new = mul(o, act(b, c_new, f"{name}/c_act"), "h_unprojected")
            if spec.num_proj:
                h_new = fc(h_new, b.const(f"{name}/P", np.asarray(params.P, np.float32)), -1, "h_new")
        else:
            h_new = act(b, pre, f"{name}/h_new")
    keep = b.op("GATHER", [valid, t], f"{name}/valid_t", dtype="bool", options="GatherOptions", axis=1)
    h_next = b.op("SELECT_V2", [keep, h_new, h], f"{name}/h_next")
    y_t = b.op("SELECT_V2", [keep, h_new, b.const(f"{name}/zero", np.float32(0))], f"{name}/y_t")
    y_t = b.op("EXPAND_DIMS", [y_t, axis], f"{name}/y_t3")
    start = b.op("CONCATENATION", [i32("zero_1", [0]), b.op("RESHAPE", [t, i32("shape_1", [1])], f"{name}/t_1",
                                                              dtype="int32"), i32("zero_1b", [0])],
                 f"{name}/start", dtype="int32", options="ConcatenationOptions", axis=0)
    y_next = b.op("DYNAMIC_UPDATE_SLICE", [y, y_t, start], f"{name}/y_next")
    t_next = b.op("ADD", [t, i32("one", 1)], f"{name}/t_next", dtype="int32", options="AddOptions")
    b.outputs = [t_next, T, h_next, y_next, xw, valid]
    if lstm:
        b.outputs.append(b.op("SELECT_V2", [keep, c_new, c[0]], f"{name}/c_next"))
    return len(graph.model.subgraphs) - 1


def loop_layer(graph: Any, canon: "CanonicalRNN", x: int, layer: int, direction: int
               ) -> Tuple[int, int, Optional[int]]:
    """One layer direction over x [B, T, I_l] in ``graph`` (:class:`cudnn_port.exports.tflite._Graph`):
    (y [B, T, S], final_h [B, S], final_c [B, H] for an LSTM, else None)."""
    g, spec = graph.g, graph.spec
    H, S, p, params = spec.num_units, spec.state_size, layer * spec.num_dirs + direction, canon.layer(layer, direction)
    lstm, name = spec.mode == "lstm", f"loop_{layer}_{direction}"
    W = np.concatenate([np.asarray(params.W[k], np.float32) for k in range(spec.num_gates)])
    bias = input_bias(spec.mode, np.asarray(params.b_W, np.float32), np.asarray(params.b_R, np.float32),
                      np.concatenate, spec.reset_after)
    xw = g.op("FULLY_CONNECTED", [x, g.const(f"{name}/W", W), g.const(f"{name}/bias", bias)], f"{name}/xw",
              options="FullyConnectedOptions", keepNumDims=True)
    y_shape = g.op("CONCATENATION", [graph.batch_time, graph.i32(f"{name}/width", [S])], f"{name}/y_shape",
                   dtype="int32", options="ConcatenationOptions", axis=0)
    y0 = g.op("FILL", [y_shape, g.const(f"{name}/zero", np.float32(0))], f"{name}/y0")  # every step writes its t
    states = [graph.state("initial_h", p, S)]
    states += [graph.state("initial_c", p, H)] if lstm else []
    outs = [g.tensor(f"{name}/out_{n}", dtype, shape) for n, dtype, shape in LOOP + (C,) * lstm]
    g.op("WHILE", [graph.i32(f"{name}/t0", 0), graph.T, states[0], y0, xw, graph.valid_b] + states[1:], outs,
         options="WhileOptions", condSubgraphIndex=_cond(graph, lstm),
         bodySubgraphIndex=_body(graph, spec, params, name))
    return outs[3], outs[2], (outs[6] if lstm else None)
