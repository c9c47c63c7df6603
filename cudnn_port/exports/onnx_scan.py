"""ONNX ``LSTM`` / ``GRU`` / ``RNN`` nodes whose ``activations`` a runtime's sequence ops do not run, rewritten as
``Scan`` loops of plain ONNX ops with the node's exact meaning (ONNX's operator spec, ``layout`` 0, no peepholes).

OpenVINO 2026.4 runs a sequence node only with Sigmoid, Tanh and Relu (:data:`SEQUENCE_FUNCTIONS`; HardSigmoid,
Affine and Softsign measured refused at load), so a cell of Keras' ``recurrent_activation="hard_sigmoid"`` or
``activation="softsign"`` would leave ``model.onnx`` unloadable there. :func:`sequence_nodes_expanded` replaces each
such node, in place, by, per direction ``d``::

    xs   = X, or ReverseSequence(X, sequence_lens) going backward (each sequence reversed within its own length;
           the whole time axis where the node has no sequence_lens)
    xw   = MatMul(xs, W[d]^T) + b                       [T, B, G*H], every step's input product at once
    h, (c), ys = Scan(h0, (c0); xw, valid)              the cell below, one step per time step
    Y[:, d] = ys, reversed back the same way going backward

with the step, gates in ONNX order (f, g, h: the node's activations, each with its alpha / beta)::

    LSTM  i, o, f, c~ = Split(xw_t + h R^T)   i, o, f = f(.)   c' = f * c + i * g(c~)   h' = o * h(c')
    GRU   z, r = f(xw_t[:2H] + h R_zr^T)      n = g(xw_t[2H:] + r * (h R_h^T + Rb_h))  (linear_before_reset=1)
                                              n = g(xw_t[2H:] + (r * h) R_h^T)          (0; Rb_h in b)
          h' = (1 - z) * n + z * h
    RNN   h' = f(xw_t + h R^T)

and, where the node has ``sequence_lens``, ``valid = t < length``: past a length h (and c) keep their values and
the output is 0, as the operator spec (and onnxruntime) say. R^T (and GRU's Rb_h) enter the Scan as states carried
through unchanged, not read from the graph around it by name: OpenVINO's Scan takes no such outer input (measured).
The functions f, g, h, read from the node and written in plain ops, are :mod:`.onnx_activations`'.
"""
from typing import TYPE_CHECKING

import numpy as np

from .onnx_activations import DEFAULT_FUNCTIONS, activation, functions
from .onnx_passes import bodies

if TYPE_CHECKING:
    import onnx

SEQUENCE_FUNCTIONS = ("Sigmoid", "Tanh", "Relu")  # the activations OpenVINO 2026.4's sequence ops run (measured)
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def needs_scan(node: "onnx.NodeProto") -> bool:
    """Whether ``node`` is a sequence node with an activation outside :data:`SEQUENCE_FUNCTIONS`, or an LSTM / GRU
    whose gates are not Sigmoid (the OpenVINO-safe form of a fused node holds a state at a padded step only through
    gates that are exactly 0 and 1 far out, exports.onnx_portable; this loop stops at each length itself)."""
    if node.op_type not in _GATES:
        return False
    fns = [name for name, _, _ in functions(node)]
    gates = fns[::len(DEFAULT_FUNCTIONS[node.op_type])] if node.op_type != "RNN" else []  # each direction's first
    return any(name not in SEQUENCE_FUNCTIONS for name in fns) or any(name != "Sigmoid" for name in gates)


def sequence_nodes_expanded(graph: "onnx.GraphProto") -> int:
    """Replace, in place, every node of ``graph`` (and of the If / Loop / Scan bodies in it) that :func:`needs_scan`
    by its Scan form (module docstring); the node's output names are kept. Returns how many were replaced."""
    out, count = [], 0
    for node in graph.node:
        for body in bodies(node):
            count += sequence_nodes_expanded(body)
        if needs_scan(node):
            out += _expanded(node, f"{node.name or node.output[0] or node.op_type}/scan_{count}")
            count += 1
        else:
            out.append(node)
    if count:
        del graph.node[:]
        graph.node.extend(out)
    return count


def _expanded(node, p):
    """The nodes that compute ``node`` (names prefixed ``p``)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import TensorProto, helper, numpy_helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("layout", 0) != 0 or attrs.get("input_forget", 0) or attrs.get("clip") is not None:
        raise ValueError(f"{node.op_type} {node.name!r}: layout 1, input_forget or clip has no Scan form here")
    op, H = node.op_type, int(attrs["hidden_size"])
    G, direction = _GATES[op], attrs.get("direction", b"forward").decode()
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    lbr = int(attrs.get("linear_before_reset", 0))
    fns = functions(node)
    per = len(fns) // len(dirs)
    ins = list(node.input) + [""] * (8 - len(node.input))
    X, W, R, B, lens, h0, c0 = ins[0], ins[1], ins[2], ins[3], ins[4], ins[5], ins[6]
    if ins[7]:
        raise ValueError(f"LSTM {node.name!r}: peepholes have no Scan form here")
    nodes = []

    def n(op_type, inputs, name, **kw):
        nodes.append(helper.make_node(op_type, inputs, [f"{p}/{name}"], **kw))
        return f"{p}/{name}"

    def const(name, value):
        nodes.append(helper.make_node("Constant", [], [f"{p}/{name}"], value=numpy_helper.from_array(np.asarray(value),
                                                                                                     f"{p}/{name}")))
        return f"{p}/{name}"

    def i64(name, value):  # an int64 constant (shapes, indices, axes)
        return const(name, np.array(value, np.int64))

    # shapes from X: T, B; zero states where the node has none
    shape = n("Shape", [X], "shape")
    batch_1 = n("Slice", [shape, i64("one", [1]), i64("two", [2])], "batch")
    zeros_shape = n("Concat", [batch_1, i64("H", [H])], "zeros_shape", axis=0)
    zeros = n("ConstantOfShape", [zeros_shape], "zeros", value=numpy_helper.from_array(np.zeros(1, np.float32)))
    valid = None
    if lens:  # valid [T, B, 1]: t < length
        T = n("Squeeze", [n("Slice", [shape, i64("zero", [0]), i64("one_b", [1])], "time_1")], "time")
        steps = n("Unsqueeze", [n("Range", [i64("t0", 0), T, i64("dt", 1)], "steps"), i64("axis_1", [1])], "steps_1")
        lens64 = n("Cast", [lens], "lens64", to=TensorProto.INT64)
        row = n("Unsqueeze", [lens64, i64("axis_0", [0])], "lens_row")
        valid = n("Unsqueeze", [n("Less", [steps, row], "valid_2"), i64("axis_2", [2])], "valid")

    def reverse(v, name):
        if lens:
            return n("ReverseSequence", [v, lens64], name, batch_axis=1, time_axis=0)
        return n("Slice", [v, i64(f"{name}_start", [-1]), i64(f"{name}_end", [np.iinfo(np.int64).min]),
                           i64(f"{name}_axes", [0]), i64(f"{name}_steps", [-1])], name)

    ys, hs, cs = [], [], []
    for d, way in enumerate(dirs):
        q = f"d{d}"
        at = i64(f"{q}_index", d)
        Wt = n("Transpose", [n("Gather", [W, at], f"{q}_W", axis=0)], f"{q}_Wt", perm=[1, 0])  # [I, G*H]
        Rt = n("Transpose", [n("Gather", [R, at], f"{q}_R", axis=0)], f"{q}_Rt", perm=[1, 0])  # [H, G*H]
        xs = X if way == "forward" else reverse(X, f"{q}_x_reversed")
        xw = n("MatMul", [xs, Wt], f"{q}_xw_raw")
        rb_h = None
        if B:
            Bd = n("Gather", [B, at], f"{q}_B", axis=0)  # [2*G*H]: Wb then Rb
            Wb = n("Slice", [Bd, i64(f"{q}_b0", [0]), i64(f"{q}_b1", [G * H])], f"{q}_Wb")
            Rb = n("Slice", [Bd, i64(f"{q}_b2", [G * H]), i64(f"{q}_b3", [2 * G * H])], f"{q}_Rb")
            if op == "GRU" and lbr:  # Rb_h stays inside r * (...)
                keep = np.concatenate([np.ones(2 * H, np.float32), np.zeros(H, np.float32)])
                rb_h = n("Slice", [Rb, i64(f"{q}_b4", [2 * H]), i64(f"{q}_b5", [3 * H])], f"{q}_Rb_h")
                Rb = n("Mul", [Rb, const(f"{q}_keep", keep)], f"{q}_Rb_zr")
            xw = n("Add", [xw, n("Add", [Wb, Rb], f"{q}_bias")], f"{q}_xw")
        state_h = zeros if not h0 else n("Gather", [h0, at], f"{q}_h0", axis=0)
        states = [state_h]
        if op == "LSTM":
            states.append(zeros if not c0 else n("Gather", [c0, at], f"{q}_c0", axis=0))
        body = _body(op, H, fns[d * per:(d + 1) * per], lbr, rb_h is not None, valid is not None, f"{p}/{q}")
        carried = [Rt] + ([rb_h] if rb_h else [])  # constants carried through: OpenVINO's Scan reads no outer name
        outs = [f"{p}/{q}_h", f"{p}/{q}_c"][:len(states)] + [f"{p}/{q}_carried_{k}" for k in range(len(carried))] \
            + [f"{p}/{q}_ys"]
        nodes.append(helper.make_node("Scan", states + carried + [xw] + ([valid] if valid else []), outs, body=body,
                                      num_scan_inputs=1 + (valid is not None), name=f"{p}/{q}_scan"))
        y = outs[-1] if way == "forward" else reverse(outs[-1], f"{q}_ys_back")
        ys.append(n("Unsqueeze", [y, i64(f"{q}_axis_1", [1])], f"{q}_y"))
        hs.append(n("Unsqueeze", [outs[0], i64(f"{q}_axis_0", [0])], f"{q}_h_n"))
        if op == "LSTM":
            cs.append(n("Unsqueeze", [outs[1], i64(f"{q}_axis_0c", [0])], f"{q}_c_n"))
    results = list(node.output) + [""] * (3 - len(node.output))
    for parts, name in zip((ys, hs, cs), results):
        if name and parts:
            nodes.append(helper.make_node("Concat", parts, [name], axis=1 if parts is ys else 0))
    return nodes


def _body(op, H, fns, lbr, has_rb_h, masked, p):
    """The Scan body of one direction: states h (, c), R^T (, Rb_h), scan inputs xw_t (, valid_t) -> h', (c',)
    R^T (, Rb_h), y_t."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import TensorProto, helper, numpy_helper

    nodes = []

    def n(op_type, inputs, name, extra=(), **kw):  # extra: the names of outputs after the first, unused
        nodes.append(helper.make_node(op_type, inputs, [f"{p}/b_{out}" for out in (name,) + tuple(extra)], **kw))
        return f"{p}/b_{name}"

    def const(name, value):
        nodes.append(helper.make_node("Constant", [], [f"{p}/b_{name}"],
                                      value=numpy_helper.from_array(np.asarray(value, np.float32), f"{p}/b_{name}")))
        return f"{p}/b_{name}"

    def apply(fn, v, name):
        return activation(fn, v, name, n, const, H)

    h, c, xw_t, valid_t = f"{p}/b_h", f"{p}/b_c", f"{p}/b_xw_t", f"{p}/b_valid_t"
    Rt, rb_h = f"{p}/b_Rt", f"{p}/b_Rb_h" if has_rb_h else None

    def split(k, name):  # the names of a Split's k outputs
        return [f"{p}/b_{name}_{i}" for i in range(k)]

    if op == "LSTM":
        g = n("Add", [xw_t, n("MatMul", [h, Rt], "hr")], "pre")
        parts = split(4, "gate")
        nodes.append(helper.make_node("Split", [g], parts, axis=1))
        i, o, f = (apply(fns[0], v, k) for v, k in zip(parts[:3], "iof"))
        c_new = n("Add", [n("Mul", [f, c], "fc"), n("Mul", [i, apply(fns[1], parts[3], "cand")], "ic")], "c_new")
        h_new = n("Mul", [o, apply(fns[2], c_new, "c_act")], "h_new")
    elif op == "GRU":
        x_parts = split(3, "x")
        nodes.append(helper.make_node("Split", [xw_t], x_parts, axis=1))
        if lbr:
            hr = n("MatMul", [h, Rt], "hr")
            h_parts = split(3, "h")
            nodes.append(helper.make_node("Split", [hr], h_parts, axis=1))
            z = apply(fns[0], n("Add", [x_parts[0], h_parts[0]], "z_pre"), "z")
            r = apply(fns[0], n("Add", [x_parts[1], h_parts[1]], "r_pre"), "r")
            inner = h_parts[2] if rb_h is None else n("Add", [h_parts[2], rb_h], "h_h")
            cand = n("Add", [x_parts[2], n("Mul", [r, inner], "r_h")], "n_pre")
        else:
            R_zr, R_h = split(2, "R")
            nodes.append(helper.make_node("Split", [Rt, n("Constant", [], "R_sizes", value=numpy_helper.from_array(
                np.array([2 * H, H], np.int64)))], [R_zr, R_h], axis=1))
            hr = n("MatMul", [h, R_zr], "hr")
            h_parts = split(2, "h")
            nodes.append(helper.make_node("Split", [hr], h_parts, axis=1))
            z = apply(fns[0], n("Add", [x_parts[0], h_parts[0]], "z_pre"), "z")
            r = apply(fns[0], n("Add", [x_parts[1], h_parts[1]], "r_pre"), "r")
            cand = n("Add", [x_parts[2], n("MatMul", [n("Mul", [r, h], "r_times_h"), R_h], "rh_h")], "n_pre")
        cand = apply(fns[1], cand, "n")
        h_new = n("Add", [cand, n("Mul", [z, n("Sub", [h, cand], "h_minus_n")], "z_h")], "h_new")  # (1-z) n + z h
        c_new = None
    else:
        h_new = apply(fns[0], n("Add", [xw_t, n("MatMul", [h, Rt], "hr")], "pre"), "h_new")
        c_new = None
    if masked:  # past a length: states kept, output 0
        y = n("Where", [valid_t, h_new, const("zero", 0.0)], "y")
        h_next = n("Where", [valid_t, h_new, h], "h_next")
        c_next = c_new and n("Where", [valid_t, c_new, c], "c_next")
    else:  # a graph output is never also a body input or another output: Identity gives each its own name
        y, h_next = n("Identity", [h_new], "y"), n("Identity", [h_new], "h_next")
        c_next = c_new and n("Identity", [c_new], "c_next")
    value = lambda name, kind=TensorProto.FLOAT: helper.make_tensor_value_info(name, kind, [None, None])
    carried = [Rt] + ([rb_h] if rb_h else [])
    through = [n("Identity", [name], f"{name.rsplit('/', 1)[1]}_next") for name in carried]
    inputs = [value(h)] + ([value(c)] if op == "LSTM" else []) + [value(Rt)] + \
        ([helper.make_tensor_value_info(rb_h, TensorProto.FLOAT, [None])] if rb_h else []) + [value(xw_t)] + \
        ([value(valid_t, TensorProto.BOOL)] if masked else [])
    outputs = [value(h_next)] + ([value(c_next)] if op == "LSTM" else []) + [value(through[0])] + \
        ([helper.make_tensor_value_info(through[1], TensorProto.FLOAT, [None])] if rb_h else []) + [value(y)]
    return helper.make_graph(nodes, f"{p}/body", inputs, outputs)
