"""One GRU layer direction as a TFLite ``WHILE`` loop of builtin ops (TFLite has no GRU op), for
:mod:`cudnn_port.exports.tflite`. cuDNN's reset-after GRU (docs/conventions.md, section 2), gates r, z, h::

    xw = FULLY_CONNECTED(x, W, input_bias)                           [B, T, 3H], once for every step
    WHILE t < T (loop variables t, T, h, y, xw, valid):
        x_r, x_z, x_h = SPLIT(xw[:, t])      h_r, h_z, h_h = SPLIT(FULLY_CONNECTED(h, R, [0, 0, b_R_h]))
        r = LOGISTIC(x_r + h_r)   z = LOGISTIC(x_z + h_z)   n = TANH(x_h + r * h_h)   h' = n + z * (h - n)
        h = SELECT_V2(valid[:, t], h', h)    y[:, t] = SELECT_V2(valid[:, t], h', 0)   (DYNAMIC_UPDATE_SLICE)

The reset-before GRU (Keras' ``reset_after=False``): h_r, h_z = SPLIT(FULLY_CONNECTED(h, R_rz)), and
n = TANH(x_h + FULLY_CONNECTED(r * h, R_h)), its b_R_h in the input bias.
"""
from typing import TYPE_CHECKING, Any, Tuple

import numpy as np

from ..canonical import input_bias

if TYPE_CHECKING:
    from ..canonical import CanonicalRNN

LOOP = (("t", "int32", []), ("T", "int32", []), ("h", "float32", [-1, -1]), ("y", "float32", [-1, -1, -1]),
        ("xw", "float32", [-1, -1, -1]), ("valid", "bool", [-1, -1, 1]))


def _loop_inputs(g, prefix):
    g.inputs = [g.tensor(f"{prefix}{name}", dtype, shape) for name, dtype, shape in LOOP]
    return g.inputs


def _cond(graph):
    """The loop condition t < T, one subgraph shared by every loop of the model."""
    if getattr(graph, "gru_cond", None) is None:
        c = graph.model.subgraph("gru_cond")
        t, T = _loop_inputs(c, "cond/")[:2]
        c.outputs = [c.op("LESS", [t, T], "cond/more", dtype="bool")]
        graph.gru_cond = len(graph.model.subgraphs) - 1
    return graph.gru_cond


def _body(graph, params, H, name, reset_after=True, activation="tanh"):
    b = graph.model.subgraph(f"{name}/body")
    t, T, h, y, xw, valid = _loop_inputs(b, f"{name}/")
    i32 = lambda n, v: b.const(f"{name}/{n}", np.asarray(v, np.int32))
    act = {"tanh": "TANH", "relu": "RELU", "sigmoid": "LOGISTIC"}[activation]  # the candidate's function
    gates = 3 if reset_after else 2  # reset before: r and z from h, the candidate's product after r
    R = np.concatenate([np.asarray(params.R[k], np.float32) for k in range(gates)])
    bias_h = np.concatenate([np.zeros(2 * H, np.float32)] + [np.asarray(params.b_R[2], np.float32)] * reset_after)
    hw = b.op("FULLY_CONNECTED", [h, b.const(f"{name}/R", R), b.const(f"{name}/b_R_h", bias_h)], f"{name}/hw",
              options="FullyConnectedOptions")
    xw_t = b.op("GATHER", [xw, t], f"{name}/xw_t", options="GatherOptions", axis=1)
    axis = i32("axis_1", 1)
    x_r, x_z, x_h = b.op("SPLIT", [axis, xw_t], [f"{name}/x_{k}" for k in "rzh"], options="SplitOptions",
                         numSplits=3)
    parts = b.op("SPLIT", [axis, hw], [f"{name}/h_{k}" for k in "rzh"[:gates]], options="SplitOptions",
                 numSplits=gates)
    add = lambda u, v, n: b.op("ADD", [u, v], f"{name}/{n}", options="AddOptions")
    mul = lambda u, v, n: b.op("MUL", [u, v], f"{name}/{n}", options="MulOptions")
    r = b.op("LOGISTIC", [add(x_r, parts[0], "r_pre")], f"{name}/r")
    z = b.op("LOGISTIC", [add(x_z, parts[1], "z_pre")], f"{name}/z")
    if reset_after:
        n = b.op(act, [add(x_h, mul(r, parts[2], "r_h"), "n_pre")], f"{name}/n")
    else:
        R_h = b.const(f"{name}/R_h", np.asarray(params.R[2], np.float32))
        h_h = b.op("FULLY_CONNECTED", [mul(r, h, "r_times_h"), R_h, -1], f"{name}/h_h", options="FullyConnectedOptions")
        n = b.op(act, [add(x_h, h_h, "n_pre")], f"{name}/n")
    h_new = add(n, mul(z, b.op("SUB", [h, n], f"{name}/h_minus_n", options="SubOptions"), "z_h"), "h_new")
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
    return len(graph.model.subgraphs) - 1


def gru_layer(graph: Any, canon: "CanonicalRNN", x: int, layer: int, direction: int) -> Tuple[int, int]:
    """One GRU direction over x [B, T, I_l] in ``graph`` (:class:`cudnn_port.exports.tflite._Graph`):
    (y [B, T, H], final_h [B, H])."""
    g, spec = graph.g, graph.spec
    H, p, params = spec.num_units, layer * spec.num_dirs + direction, canon.layer(layer, direction)
    name = f"gru_{layer}_{direction}"
    W = np.concatenate([np.asarray(params.W[k], np.float32) for k in range(3)])
    bias = input_bias("gru", np.asarray(params.b_W, np.float32), np.asarray(params.b_R, np.float32), np.concatenate,
                      spec.reset_after)
    xw = g.op("FULLY_CONNECTED", [x, g.const(f"{name}/W", W), g.const(f"{name}/bias", bias)], f"{name}/xw",
              options="FullyConnectedOptions", keepNumDims=True)
    y_shape = g.op("CONCATENATION", [graph.batch_time, graph.i32(f"{name}/width", [H])], f"{name}/y_shape",
                   dtype="int32", options="ConcatenationOptions", axis=0)
    y0 = g.op("FILL", [y_shape, g.const(f"{name}/zero", np.float32(0))], f"{name}/y0")  # every step writes its t
    h0 = graph.state("initial_h", p, H)
    outs = [g.tensor(f"{name}/out_{n}", dtype, shape) for n, dtype, shape in LOOP]
    cond = _cond(graph)
    body = _body(graph, params, H, name, spec.reset_after, spec.activation)
    g.op("WHILE", [graph.i32(f"{name}/t0", 0), graph.T, h0, y0, xw, graph.valid_b], outs, options="WhileOptions",
         condSubgraphIndex=cond, bodySubgraphIndex=body)
    return outs[3], outs[2]
