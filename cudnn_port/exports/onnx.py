"""ONNX model of one stack: one fused ``LSTM`` / ``GRU`` node per layer (no Loop or Scan), ``sequence_lens`` wired.

Graph, with x batch-major as in every artifact::

    X_0 = Transpose(inputs, [1, 0, 2])                                  [T, B, I]
    for layer l:
        Y, Y_h[, Y_c] = LSTM|GRU(X_l, W_l, R_l, B_l, sequence_lengths, initial_h[lD:(l+1)D][, initial_c[...]])
        X_{l+1} = Reshape(Transpose(Y, [0, 2, 1, 3]), [0, 0, -1])     [T, D, B, H] -> [T, B, D*H]
    outputs = Transpose(X_L, [1, 0, 2]);  final_h = Concat(Y_h over layers)

Weights: LSTM gates i, o, f, c (``gates.ONNX_LSTM``), ``B = [b_W, b_R]``; GRU gates z, r, h with
``linear_before_reset=1`` (cuDNN's reset-after form). Written with IR version 8 / opset 17, which onnxruntime
accepts. ``initial_h`` / ``initial_c`` are required inputs here: pass zeros for a fresh start.
"""
import numpy as np

from ..gates import CUDNN_ORDER, ONNX_GRU, ONNX_LSTM, reorder
from . import io_names

OPSET = 17
IR_VERSION = 8


def _weights(canon, layer):
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
    return [np.stack(a).astype(np.float32) for a in (W, R, B)]


def stack_graph(canon, x, lengths, h0, c0, node, const, prefix=""):
    """The stack's ONNX nodes, made through ``node(op, inputs, outputs, **attrs)`` and ``const(name, array) ->
    tensor name``: x time-major [T, B, I], lengths [B] int32 (or "" for full length), h0 / c0 [L*D, B, H] (c0
    LSTM only). Returns the names of y [T, B, D*H], final_h and final_c (None for GRU)."""
    spec = canon.spec
    H, D, is_lstm = spec.num_units, spec.num_dirs, spec.mode == "lstm"
    flatten, axis = const(f"{prefix}flatten_dirs", np.array([0, 0, -1], np.int64)), \
        const(f"{prefix}axis_0", np.array([0], np.int64))
    finals_h, finals_c = [], []
    for layer in range(spec.num_layers):
        W, R, B = (const(f"{prefix}{n}_{layer}", a) for n, a in zip("WRB", _weights(canon, layer)))
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
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    spec = canon.spec
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
    y, final_h, final_c = stack_graph(canon, x, "sequence_lengths", "initial_h", "initial_c" if is_lstm else None,
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


def cudnn_node_handler(ctx, node, name, args):
    """tf2onnx handler (``custom_op_handlers``) for a CudnnRNN / V2 / V3 node of a frozen graph: its params (a
    constant once the graph is frozen) unpacked, the node replaced by :func:`stack_graph`'s fused nodes."""
    from ..errors import CudnnPortError
    from ..infer import candidates
    from ..layout import unpack

    def attr(key, default):
        value = node.get_attr_value(key, default)
        return value.decode() if isinstance(value, bytes) else value

    params = node.inputs[3]
    if not params.is_const():
        raise CudnnPortError(f"node {name}: its params are not constant after freezing; cannot write ONNX weights")
    value = params.get_tensor_value(as_list=False).reshape(-1)
    mode, bidirectional = attr("rnn_mode", "lstm"), attr("direction", "unidirectional") == "bidirectional"
    time_major = bool(attr("time_major", True)) if node.type == "CudnnRNNV3" else True
    dims = [ctx.get_shape(node.input[i]) or [None] for i in (0, 1)]
    known = dict(input_size=dims[0][-1], num_units=dims[1][-1])
    found = candidates(value.size, mode=mode, bidirectional=bidirectional, dtype="float32",
                       **{k: v for k, v in known.items() if v not in (None, -1)})
    if len(found) != 1:
        raise CudnnPortError(f"node {name}: {len(found)} specs fit its {value.size} params; cannot tell its sizes")
    canon, is_lstm, prefix = unpack(found[0], value.astype(np.float32)), mode == "lstm", f"{name}/onnx/"
    from onnx import TensorProto

    onnx_float, onnx_int32 = TensorProto.FLOAT, TensorProto.INT32

    def make(op, inputs, outputs, **attrs):
        ranks = {"LSTM": [4, 3, 3], "GRU": [4, 3], "Cast": [1], "Transpose": [len(attrs.get("perm", ()))]}
        shapes = [[-1] * r for r in ranks.get(op, [3])]  # ranks let tf2onnx's optimizers reason about them
        dtypes = [onnx_int32 if op == "Cast" else onnx_float] * len(outputs)
        return ctx.make_node(op, inputs, attr=attrs, outputs=outputs, name=outputs[0], shapes=shapes,
                             dtypes=dtypes).output[0]

    def const(const_name, array):
        return ctx.make_const(const_name, array).output[0]

    def time_first(tensor, label):  # batch-major [B, X, ...] <-> time-major / state-major: swap the first two axes
        return tensor if time_major else make("Transpose", [tensor], [f"{prefix}{label}"], perm=[1, 0, 2])

    x = time_first(node.input[0], "x_t")
    h0 = time_first(node.input[1], "h0_t")
    c0 = time_first(node.input[2], "c0_t") if is_lstm else None
    lengths = make("Cast", [node.input[4]], [f"{prefix}lengths"], to=6) if len(node.input) > 4 else ""
    y, h_n, c_n = stack_graph(canon, x, lengths, h0, c0, make, const, prefix)
    replaced = [time_first(y, "y_b"), time_first(h_n, "h_n_b")] + ([time_first(c_n, "c_n_b")] if is_lstm else [])
    outputs = list(node.output)
    ctx.remove_node(node.name)
    for old, new in zip(outputs, replaced):
        ctx.replace_all_inputs(old, new)


CUDNN_HANDLERS = {op: (cudnn_node_handler, []) for op in ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3")}


def quiet_converters():
    """tf2onnx warns about the reserve outputs of cuDNN nodes no one reads, TensorFlow about its v1 freezing
    helpers: neither is news to the user."""
    import logging

    from .._tf import import_tf

    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    import_tf().get_logger().setLevel(logging.ERROR)


def write_graph_onnx(graph_def, inputs, outputs, path, renames=None):
    """ONNX of a frozen GraphDef holding cuDNN nodes: tf2onnx for everything else, fused ONNX LSTM / GRU nodes for
    each cuDNN node (:func:`cudnn_node_handler`); ``renames`` maps tensor names to ONNX input/output names."""
    import onnx
    from tf2onnx import convert

    quiet_converters()
    for node in graph_def.node:  # TF's own shape hints for a GRU node's output_c can contradict its shape function
        if node.op in CUDNN_HANDLERS:
            node.attr.pop("_output_shapes", None)
    model, _ = convert.from_graph_def(graph_def, input_names=inputs, output_names=outputs, opset=OPSET,
                                      custom_op_handlers=dict(CUDNN_HANDLERS), tensors_to_rename=renames)
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return model


def write_saved_model_onnx(saved_model, path, signature="serving_default"):
    """:func:`write_graph_onnx` of a SavedModel signature; inputs and outputs keep the signature's names."""
    from tf2onnx import tf_loader

    quiet_converters()
    frozen, inputs, outputs, renames = tf_loader.from_saved_model(
        saved_model, None, None, signatures=[signature], return_tensors_to_rename=True)
    return write_graph_onnx(frozen, inputs, outputs, path, renames)
