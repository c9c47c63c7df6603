"""ONNX of graphs that hold cuDNN nodes, through tf2onnx: tf2onnx converts everything else, and a custom handler
turns each CudnnRNN / V2 / V3 node (its params constant once the graph is frozen) into fused ONNX LSTM / GRU / RNN
nodes:
those of :func:`cudnn_port.exports.onnx_portable.portable_stack_graph` where the node has sequence lengths (a
CudnnRNNV3 with its lengths input), so that runtimes which ignore ``sequence_lens`` (OpenVINO) compute ragged batches
right too; those of :func:`cudnn_port.exports.onnx.stack_graph` where it has none (full length, where the plain form
is right everywhere)."""
import contextlib
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from .onnx import IR_VERSION, OPSET, layer_weights, stack_graph
from .onnx_ctc import ctc_greedy_decoder_handler
from .onnx_passes import sequence_inputs_apart, squeeze_pairs_cancelled, unread_outputs_dropped
from .onnx_guard import guard_empty
from .onnx_optimize import optimized_without_copies
from .onnx_scan import sequence_nodes_expanded
from .onnx_portable import portable_stack_graph
from ..errors import CudnnPortError
from ..infer import candidates
from ..layout import unpack

if TYPE_CHECKING:
    import onnx
    from tensorflow.core.framework import graph_pb2
    from ..layout import RNNSpec

_FIXED_RANKS = {"LSTM": [4, 3, 3], "GRU": [4, 3], "RNN": [4, 3], "Shape": [1], "Range": [1]}


def cudnn_node_handler(ctx: Any, node: Any, name: str, args: Any) -> None:
    """tf2onnx handler (``custom_op_handlers``) for a CudnnRNN / V2 / V3 node of a frozen graph: its params (a
    constant once the graph is frozen) unpacked, the node replaced by the fused nodes of
    :func:`portable_stack_graph` (with sequence lengths) or :func:`stack_graph` (without). A float16 or float64 node
    (tf_keras's mixed_float16 policy, floatx float64) gets Casts to float32 around those nodes and back. ``args``:
    ``[]``, or ``[{params as float32 bytes: RNNSpec}]``, the specs the fused layers state (:func:`write_graph_onnx`)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import TensorProto

    FLOAT = TensorProto.FLOAT

    def attr(key, default):
        value = node.get_attr_value(key, default)
        return value.decode() if isinstance(value, bytes) else value

    params = node.inputs[3]
    if params.is_const():
        value = params.get_tensor_value(as_list=False).reshape(-1)
        size = value.size
    else:  # computed in the graph: e.g. in a branch of an If, from weights the branch receives as inputs
        value, size = None, (ctx.get_shape(node.input[3]) or [-1])[0]
        if size in (None, -1):
            raise CudnnPortError(f"node {name}: its params are neither constant after freezing nor of a known size; "
                                 "cannot write ONNX weights")
    mode, bidirectional = attr("rnn_mode", "lstm"), attr("direction", "unidirectional") == "bidirectional"
    time_major = bool(attr("time_major", True)) if node.type == "CudnnRNNV3" else True
    dims = [ctx.get_shape(node.input[i]) or [None] for i in (0, 1)]
    known = dict(input_size=dims[0][-1], num_units=dims[1][-1])
    stated = (args[0] if args else {}).get(value.astype(np.float32).tobytes()) if value is not None else None
    if stated is not None:  # a fused layer's own spec, found by its buffer: what the buffer's size cannot say
        found = [replace(stated, dtype="float32")]  # (a reset-before GRU is a GRU node of the same size)
    else:
        found = candidates(size, mode=mode, bidirectional=bidirectional, dtype="float32",
                           **{k: v for k, v in known.items() if v not in (None, -1)})
    if len(found) != 1:
        raise CudnnPortError(f"node {name}: {len(found)} specs fit its {size} params; cannot tell its sizes")
    is_lstm, prefix, weights = mode == "lstm", f"{name}/onnx/", None
    dtype = ctx.get_dtype(node.input[0])  # float16 (mixed precision) or float64 nodes compute in float32 here

    def as_dtype(tensor, label, to):  # onnxruntime's CPU LSTM / GRU compute in float32 (double: "not supported yet")
        return tensor if to == dtype == FLOAT else make("Cast", [tensor], [f"{prefix}{label}"], to=to)

    if value is not None:
        canon = unpack(found[0], value.astype(np.float32))
    else:  # W, R, B gathered from params at run time: the positions come from unpacking arange(size)
        canon = unpack(found[0], np.arange(size, dtype=np.int64))

        def weights(layer):
            return [make("Gather", [params_f32, const(f"{prefix}{n}_index_{layer}", index)],
                         [f"{prefix}{n}_{layer}"], axis=0)
                    for n, index in zip("WRB", layer_weights(canon, layer, np.int64))]

    def make(op, inputs, outputs, **attrs):  # ranks and dtypes let tf2onnx's optimizers reason about the outputs
        ranks = _output_ranks(ctx, op, inputs, attrs)
        dtypes = [_output_dtype(ctx, op, inputs, attrs)] * len(outputs)
        return ctx.make_node(op, inputs, attr=attrs, outputs=outputs, name=outputs[0], dtypes=dtypes,
                             shapes=[None if r is None else [-1] * r for r in ranks]).output[0]

    def const(const_name, array):
        return ctx.make_const(const_name, array).output[0]

    def time_first(tensor, label):  # batch-major [B, X, ...] <-> time-major / state-major: swap the first two axes
        return tensor if time_major else make("Transpose", [tensor], [f"{prefix}{label}"], perm=[1, 0, 2])

    params_f32 = as_dtype(node.input[3], "params_f32", FLOAT) if value is None else None
    x = time_first(as_dtype(node.input[0], "x_f32", FLOAT), "x_t")
    if all(_zeros(ctx, node.input[i]) for i in ((1, 2) if is_lstm else (1,))):
        h0 = c0 = None  # zero initial states: the fused nodes' own default
    else:
        h0 = time_first(as_dtype(node.input[1], "h0_f32", FLOAT), "h0_t")
        c0 = time_first(as_dtype(node.input[2], "c0_f32", FLOAT), "c0_t") if is_lstm else None
    lengths = make("Cast", [node.input[4]], [f"{prefix}lengths"], to=6) if len(node.input) > 4 else ""
    form = portable_stack_graph if lengths else stack_graph  # full length: the plain form is right everywhere
    y, h_n, c_n = form(canon, x, lengths, h0, c0, make, const, prefix, weights)
    replaced = [as_dtype(time_first(t, f"{label}_b"), f"{label}_out", dtype)
                for t, label in zip([y, h_n] + [c_n] * is_lstm, ("y", "h_n", "c_n"))]
    outputs = list(node.output)
    for old, new in zip(outputs, replaced):  # TF's known sizes, so that a cuDNN node reading this one knows its own
        shape = ctx.get_shape(old)
        if shape is not None and len(shape) == ctx.get_rank(new):
            ctx.set_shape(new, shape)
    ctx.remove_node(node.name)
    for old, new in zip(outputs, replaced):
        ctx.replace_all_inputs(old, new)


def _zeros(ctx, name):
    """Whether tensor ``name`` is all zeros by construction: a zero constant, or a zero filled / expanded to a shape
    (``tf.zeros`` of a batch-sized shape, before or after tf2onnx maps it)."""
    node = ctx.get_node_by_output(name)
    if node is None:
        return False
    if node.is_const():
        return not np.any(node.get_tensor_value(as_list=False))
    if node.type == "ConstantOfShape":
        value = node.get_attr_value("value")
        return value is None or not np.any(_tensor_value(value))
    if node.type in ("Fill", "Expand"):
        value = node.inputs[1 if node.type == "Fill" else 0]
        return value is not None and value.is_const() and not np.any(value.get_tensor_value(as_list=False))
    return node.type == "ZerosLike"


def _tensor_value(proto):
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import numpy_helper

    return numpy_helper.to_array(proto)


def _output_ranks(ctx, op, inputs, attrs):
    """Ranks of the outputs of a node the handler makes (None: unknown), from its inputs' ranks; covers the ops of
    :func:`stack_graph` and :func:`portable_stack_graph`."""
    if op in _FIXED_RANKS:
        return _FIXED_RANKS[op]
    if op == "Transpose":
        return [len(attrs["perm"])]
    ranks = [ctx.get_rank(name) for name in inputs]
    if None in ranks:
        return [None]
    if op == "Gather":
        return [ranks[0] + ranks[1] - 1]
    if op in ("Unsqueeze", "Squeeze", "Reshape"):
        value = ctx.get_node_by_output(inputs[1]).get_tensor_value(as_list=False)
        return [{"Unsqueeze": ranks[0] + value.size, "Squeeze": ranks[0] - value.size}.get(op, value.size)]
    if op in ("Less", "Sub", "Mul", "Max", "Where"):
        return [max(ranks)]
    return [ranks[0]]  # Cast, Not, Concat, Slice, Expand (to its input's rank here), ReverseSequence, GatherElements


def _output_dtype(ctx, op, inputs, attrs):
    """ONNX dtype of a node's outputs: Cast's target, int64 for Shape, bool for comparisons, float for the fused
    nodes, a Where's values', else its first input's (int64 index arithmetic stays int64)."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import TensorProto

    fixed = {"Cast": attrs.get("to"), "Shape": TensorProto.INT64, "Less": TensorProto.BOOL, "Not": TensorProto.BOOL,
             "LSTM": TensorProto.FLOAT, "GRU": TensorProto.FLOAT, "RNN": TensorProto.FLOAT}
    return fixed[op] if op in fixed else ctx.get_dtype(inputs[1 if op == "Where" else 0])


CUDNN_HANDLERS: Dict[str, Tuple[Callable[..., Any], List[Any]]] = {
    op: (cudnn_node_handler, []) for op in ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3")}
HANDLERS = dict(CUDNN_HANDLERS, CTCGreedyDecoder=(ctc_greedy_decoder_handler, []))  # tf2onnx's fails on blank rows


@contextlib.contextmanager
def quiet_converters() -> Iterator[None]:
    """While inside, tf2onnx's and TensorFlow's loggers say only errors: tf2onnx warns about the reserve outputs of
    cuDNN nodes no one reads, TensorFlow about its v1 freezing helpers; neither is news to the user. Their levels
    are restored after (a library call leaves the caller's loggers as it found them)."""
    loggers = [logging.getLogger("tf2onnx"), logging.getLogger("tensorflow")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def write_graph_onnx(graph_def: "graph_pb2.GraphDef", inputs: Sequence[str], outputs: Sequence[str], path: str,
                     renames: Optional[Dict[str, str]] = None,
                     specs: Optional[Dict[bytes, "RNNSpec"]] = None) -> "onnx.ModelProto":
    """ONNX of a frozen GraphDef holding cuDNN nodes: tf2onnx for everything else, fused ONNX LSTM / GRU nodes for
    each cuDNN node (:func:`cudnn_node_handler`), CTCGreedyDecoder by :mod:`.onnx_ctc` instead of tf2onnx's;
    ``renames`` maps tensor names to ONNX input/output names; ``specs`` ({a fused layer's buffer as float32 bytes: its
    RNNSpec}) states the spec of each node whose params are that buffer (a reset-before GRU's, which a node's size and
    attributes do not say). Saved at ``path`` unless it is None; returns the ModelProto."""
    # lazy: onnx, tf2onnx, loaded on first use (import cudnn_port stays light)
    import onnx
    from tf2onnx import convert

    handlers = dict(HANDLERS)
    if specs:  # each node's spec by its params, where the fused layers that made them state it
        # tf2onnx's handler tuples: (func, [the op the node becomes, then the handler's args])
        handlers.update({op: (cudnn_node_handler, [op, specs]) for op in CUDNN_HANDLERS})
    for node in graph_def.node:  # TF's own shape hints for a GRU node's output_c can contradict its shape function
        if node.op in CUDNN_HANDLERS:
            node.attr.pop("_output_shapes", None)
    _unique_returns(graph_def.library)

    def tf2onnx_of(graph):
        return convert.from_graph_def(graph, input_names=inputs, output_names=outputs, opset=OPSET,
                                      custom_op_handlers=handlers, tensors_to_rename=renames)[0]

    with quiet_converters():
        model = optimized_without_copies(tf2onnx_of, graph_def)
    model.ir_version = IR_VERSION
    squeeze_pairs_cancelled(model.graph)
    unread_outputs_dropped(model.graph)
    sequence_inputs_apart(model.graph)  # OpenVINO computes one of two nodes sharing X wrongly
    sequence_nodes_expanded(model.graph)  # activations OpenVINO's sequence ops do not run: Scan loops
    onnx.checker.check_model(model)
    if path is not None:
        onnx.save(model, str(path))
    return model


def _unique_returns(library):
    """Give (in place) each function output that repeats another output of its function a node of its own.
    Grappler folds Identity nodes, so tf_keras's masked cuDNN branch (an If branch) returns h twice once frozen
    (last output and state), and tf2onnx's If conversion loses an output named twice ("cannot find node by output
    id"). The node is a StopGradient, which Grappler's passes here (constfold, function) keep."""
    for f in library.function:
        seen = set()
        for arg in f.signature.output_arg:
            value = f.ret[arg.name]
            if value in seen:
                node = f.node_def.add(name=f"{arg.name}_cudnn_port_unique", op="StopGradient", input=[value])
                node.attr["T"].type = arg.type
                f.ret[arg.name] = f"{node.name}:output:0"
            seen.add(value)


def name_dynamic_dims(model: "onnx.ModelProto", path: str,
                      axes: Optional[Dict[str, List[Optional[str]]]] = None) -> None:
    """Name the unknown dimensions of the model's inputs and outputs ``batch`` (first) and ``time`` (second) instead
    of tf2onnx's ``unk__N``, or by ``axes`` ({input or output name: each dimension's role or None}) where given,
    add the guard of :mod:`.onnx_guard` over them, and save it at ``path``."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    import onnx

    for value in list(model.graph.input) + list(model.graph.output):
        roles = (axes or {}).get(value.name)
        for i, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                if roles is not None:
                    dim.dim_param = roles[i] if i < len(roles) and roles[i] else f"dim_{i}"
                else:
                    dim.dim_param = ("batch", "time")[i] if i < 2 else f"dim_{i}"
    guard_empty(model)  # onnxruntime aborts the process on an empty batch
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def write_saved_model_onnx(saved_model: str, path: str, signature: str = "serving_default") -> "onnx.ModelProto":
    """:func:`write_graph_onnx` of a SavedModel signature; inputs and outputs keep the signature's names."""
    # lazy: tf2onnx, loaded on first use (import cudnn_port stays light)
    from tf2onnx import tf_loader

    with quiet_converters():
        frozen, inputs, outputs, renames = tf_loader.from_saved_model(
            saved_model, None, None, signatures=[signature], return_tensors_to_rename=True)
    return write_graph_onnx(frozen, inputs, outputs, path, renames)
