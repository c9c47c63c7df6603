"""ONNX model of one stack: one fused ``LSTM`` / ``GRU`` node per layer (no Loop or Scan), ``sequence_lens`` wired.

Graph, with x batch-major as in every artifact::

    X_0 = Transpose(inputs, [1, 0, 2])                                  [T, B, I]
    for layer l:
        Y, Y_h[, Y_c] = LSTM|GRU(X_l, W_l, R_l, B_l, sequence_lengths, initial_h[lD:(l+1)D][, initial_c[...]])
        X_{l+1} = Reshape(Transpose(Y, [0, 2, 1, 3]), [0, 0, -1])     [T, D, B, H] -> [T, B, D*H]
    outputs = Transpose(X_L, [1, 0, 2]);  final_h = Concat(Y_h over layers)

Weights: LSTM gates i, o, f, c (``gates.ONNX_LSTM``), ``B = [b_W, b_R]``; GRU gates z, r, h with
``linear_before_reset=1`` (cuDNN's reset-after form). Written with IR version 8 / opset 17, which onnxruntime
accepts.

``initial_h`` / ``initial_c`` may be left out: each is a graph input backed by an initializer of zeros
``[L*D, 1, H]`` (an initializer listed among the inputs is the input's default, which a feed overrides), and the
graph broadcasts it to the batch (``Expand``). Fed only ``inputs`` and ``sequence_lengths``, the model runs from
zero states; fed states ``[L*D, B, H]``, it uses them.

ONNX's LSTM has no projection: a stack with one gets no ONNX artifact (:class:`~cudnn_port.errors.UnsupportedError`).
"""
import numpy as np

from ..errors import UnsupportedError
from ..gates import CUDNN_ORDER, ONNX_GRU, ONNX_LSTM, reorder
from . import io_names

OPSET = 17
IR_VERSION = 8


def layer_weights(canon, layer, dtype=np.float32):
    """W [D, G*H, I_l], R [D, G*H, H], B [D, 2*G*H] of one layer in ONNX gate order. With ``canon`` unpacked from
    ``np.arange(param_count)`` and ``dtype`` int64: the position in params each weight comes from."""
    spec = canon.spec
    dst = ONNX_LSTM if spec.mode == "lstm" else ONNX_GRU
    src = CUDNN_ORDER[spec.mode]
    W, R, B = [], [], []
    for direction in range(spec.num_dirs):
        p = canon.layer(layer, direction)
        W.append(reorder(np.asarray(p.W), src, dst).reshape(-1, p.W.shape[2]))
        R.append(reorder(np.asarray(p.R), src, dst).reshape(-1, spec.num_units))
        B.append(np.concatenate([reorder(np.asarray(p.b_W), src, dst).reshape(-1),
                                 reorder(np.asarray(p.b_R), src, dst).reshape(-1)]))
    return [np.stack(a).astype(dtype) for a in (W, R, B)]


def stack_graph(canon, x, lengths, h0, c0, node, const, prefix="", weights=None):
    """The stack's ONNX nodes, made through ``node(op, inputs, outputs, **attrs)`` and ``const(name, array) ->
    tensor name``: x time-major [T, B, I], lengths [B] int32 (or "" for full length), h0 / c0 [L*D, B, H] (c0
    LSTM only). Returns the names of y [T, B, D*H], final_h and final_c (None for GRU). ``weights(layer)``, if
    given, returns the names of that layer's W, R, B tensors (computed in the graph) instead of constants."""
    spec = canon.spec
    H, D, is_lstm = spec.num_units, spec.num_dirs, spec.mode == "lstm"
    flatten, axis = const(f"{prefix}flatten_dirs", np.array([0, 0, -1], np.int64)), \
        const(f"{prefix}axis_0", np.array([0], np.int64))
    finals_h, finals_c = [], []
    for layer in range(spec.num_layers):
        W, R, B = weights(layer) if weights else (const(f"{prefix}{n}_{layer}", a)
                                                  for n, a in zip("WRB", layer_weights(canon, layer)))
        start = const(f"{prefix}start_{layer}", np.array([layer * D], np.int64))
        end = const(f"{prefix}end_{layer}", np.array([(layer + 1) * D], np.int64))
        states = []
        for label, state in (("h0", h0), ("c0", c0)) if is_lstm else (("h0", h0),):
            states.append(node("Slice", [state, start, end, axis], [f"{prefix}{label}_{layer}"]))
        outs = [f"{prefix}y_{layer}", f"{prefix}y_h_{layer}"] + ([f"{prefix}y_c_{layer}"] if is_lstm else [])
        attrs = dict(hidden_size=H, direction="bidirectional" if D == 2 else "forward")
        if not is_lstm:
            attrs["linear_before_reset"] = 1
        node("LSTM" if is_lstm else "GRU", [x, W, R, B, lengths] + states, outs, **attrs)
        y = node("Transpose", [outs[0]], [f"{prefix}y_t_{layer}"], perm=[0, 2, 1, 3])
        x = node("Reshape", [y, flatten], [f"{prefix}x_{layer + 1}"])
        finals_h.append(outs[1])
        if is_lstm:
            finals_c.append(outs[2])
    final_h = node("Concat", finals_h, [f"{prefix}h_n"], axis=0)
    final_c = node("Concat", finals_c, [f"{prefix}c_n"], axis=0) if is_lstm else None
    return x, final_h, final_c


def build_model(canon, name="rnn"):
    """The ONNX ModelProto of stack ``canon`` (see the module docstring)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    spec = canon.spec
    if spec.num_proj:
        raise UnsupportedError(f"ONNX's LSTM has no projection, so a {spec.describe()} has no ONNX form")
    H, D, is_lstm = spec.num_units, spec.num_dirs, spec.mode == "lstm"
    state_shape = [spec.num_pseudo_layers, "batch", H]
    graph_inputs = [helper.make_tensor_value_info("inputs", TensorProto.FLOAT, ["batch", "time", spec.input_size]),
                    helper.make_tensor_value_info("sequence_lengths", TensorProto.INT32, ["batch"]),
                    helper.make_tensor_value_info("initial_h", TensorProto.FLOAT, state_shape)]
    if is_lstm:
        graph_inputs.append(helper.make_tensor_value_info("initial_c", TensorProto.FLOAT, state_shape))
    nodes, inits = [], []

    def node(op, inputs, outputs, **attrs):
        nodes.append(helper.make_node(op, inputs, outputs, name=outputs[0] if op in ("LSTM", "GRU") else "", **attrs))
        return outputs[0]

    def const(const_name, value):
        inits.append(numpy_helper.from_array(value, const_name))
        return const_name

    x = node("Transpose", ["inputs"], ["x_0"], perm=[1, 0, 2])
    batch = node("Slice", [node("Shape", ["inputs"], ["input_shape"]), const("zero", np.array([0], np.int64)),
                           const("one", np.array([1], np.int64))], ["batch"])
    full = node("Concat", [const("layers", np.array([spec.num_pseudo_layers], np.int64)), batch,
                           const("units", np.array([H], np.int64))], ["state_shape"], axis=0)
    states = []
    for label in ("initial_h", "initial_c") if is_lstm else ("initial_h",):
        const(label, np.zeros((spec.num_pseudo_layers, 1, H), np.float32))  # the default: zeros, broadcast
        states.append(node("Expand", [label, full], [f"{label}_b"]))
    y, final_h, final_c = stack_graph(canon, x, "sequence_lengths", states[0], states[1] if is_lstm else None,
                                      node, const)
    node("Transpose", [y], ["outputs"], perm=[1, 0, 2])
    node("Identity", [final_h], ["final_h"])
    graph_outputs = [helper.make_tensor_value_info("outputs", TensorProto.FLOAT, ["batch", "time", D * H]),
                     helper.make_tensor_value_info("final_h", TensorProto.FLOAT, state_shape)]
    if is_lstm:
        node("Identity", [final_c], ["final_c"])
        graph_outputs.append(helper.make_tensor_value_info("final_c", TensorProto.FLOAT, state_shape))
    graph = helper.make_graph(nodes, name, graph_inputs, graph_outputs, initializer=inits)
    model = helper.make_model(graph, producer_name="cudnn-port", opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    assert [i.name for i in graph_inputs] == list(io_names(spec)[0])
    return model


def write_onnx(canon, path, name="rnn"):
    import onnx

    onnx.save(build_model(canon, name), str(path))
