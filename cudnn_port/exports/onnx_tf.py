"""ONNX of graphs that hold cuDNN nodes, through tf2onnx: tf2onnx converts everything else, and a custom handler
turns each CudnnRNN / V2 / V3 node (its params constant once the graph is frozen) into the fused ONNX LSTM / GRU
nodes of :func:`cudnn_port.exports.onnx.stack_graph`."""
import numpy as np

from .onnx import IR_VERSION, OPSET, stack_graph


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

    from ..deps import import_tf

    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    import_tf().get_logger().setLevel(logging.ERROR)


def write_graph_onnx(graph_def, inputs, outputs, path, renames=None):
    """ONNX of a frozen GraphDef holding cuDNN nodes: tf2onnx for everything else, fused ONNX LSTM / GRU nodes for
    each cuDNN node (:func:`cudnn_node_handler`); ``renames`` maps tensor names to ONNX input/output names. Saved
    at ``path`` unless it is None; returns the ModelProto."""
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
    if path is not None:
        onnx.save(model, str(path))
    return model


def name_dynamic_dims(model, path):
    """Name the unknown dimensions of the model's inputs and outputs ``batch`` (first) and ``time`` (second) instead
    of tf2onnx's ``unk__N``, and save it at ``path``."""
    import onnx

    for value in list(model.graph.input) + list(model.graph.output):
        for i, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                dim.dim_param = ("batch", "time")[i] if i < 2 else f"dim_{i}"
    onnx.save(model, str(path))


def write_saved_model_onnx(saved_model, path, signature="serving_default"):
    """:func:`write_graph_onnx` of a SavedModel signature; inputs and outputs keep the signature's names."""
    from tf2onnx import tf_loader

    quiet_converters()
    frozen, inputs, outputs, renames = tf_loader.from_saved_model(
        saved_model, None, None, signatures=[signature], return_tensors_to_rename=True)
    return write_graph_onnx(frozen, inputs, outputs, path, renames)
