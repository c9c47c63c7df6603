"""A guard at an ONNX model's inputs and outputs for the sizes onnxruntime's sequence kernels abort the process on,
and for lengths no runtime agrees on.

onnxruntime 1.31.1's CPU ``LSTM`` and ``GRU`` kernels end the whole process (``std::terminate``: "terminate called
without an active exception", SIGABRT, no Python exception a server could catch) on an empty batch, and its ``GRU``
on zero time steps without ``sequence_lens`` (measured on one bare node: LSTM, batch 0; GRU, batch 0, and time 0
without ``sequence_lens``). So every model.onnx cudnn-port writes (a stack's, a whole model's) carries, where its
inputs have a dynamic dimension named ``batch`` / ``time``:

* **empty batch -> empty outputs.** Each input of a ``batch`` dimension gets one padding row when (and only when)
  the batch is 0 (``Pad`` by ``Cast(Equal(B, 0))``: zeros, or 1 for a rank-1 integer input such as
  ``sequence_lengths``, a valid length), and each output of a ``batch`` dimension is sliced back to the first B
  rows: nothing, for B = 0. Rows are computed apart, so the padding row changes no other row;
* **zero time steps -> a catchable error.** A ``ConstantOfShape`` of shape ``[-1]`` when the time is 0 (``[1]``
  otherwise, summed to a 0 every input adds) fails in the node named :data:`TIME_GUARD`, whose name says what is
  wrong, in onnxruntime and OpenVINO alike (a ``Range`` of step 0 killed OpenVINO 2026.4 with SIGFPE, and OpenVINO
  folded a ``Reshape`` probe away); a sequence of no steps has no last step, so no final state to return.
* **a length outside [1, time] -> a catchable error** (a stack's ``sequence_lengths``): the node named
  :data:`LENGTHS_GUARD` fails the same way. Such lengths have no cuDNN meaning, and each runtime made up its own
  answer (for length 0 onnxruntime, OpenVINO and LiteRT returned three different final states).

For B > 0 and T > 0 all are exact: a ``Pad`` by 0 and a ``Slice`` of all rows copy the values.
"""
from typing import TYPE_CHECKING, Dict, List, Optional

import numpy as np

from .onnx_passes import bodies

if TYPE_CHECKING:
    import onnx

PREFIX = "empty_guard/"
TIME_GUARD = PREFIX + "zero_length_input_refused: time must be at least 1"
LENGTHS_GUARD = PREFIX + "sequence_lengths_refused: each length must be in [1, time]"


def _dims(value) -> List[str]:
    return [d.dim_param for d in value.type.tensor_type.shape.dim]


def _rename(graph: "onnx.GraphProto", names: Dict[str, str]) -> None:
    """Every read of a tensor in ``names`` (in nodes and in the If / Loop / Scan bodies inside them) renamed."""
    for node in graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
        for body in bodies(node):
            _rename(body, names)
        # a body's own outputs may name an outer tensor it passes through
        for body in bodies(node):
            for out in body.output:
                out.name = names.get(out.name, out.name)


def guard_empty(model: "onnx.ModelProto", lengths: Optional[str] = None) -> None:
    """Add the guard of the module docstring to ``model`` in place (nothing where no input has a ``batch``
    dimension); ``lengths``: the name of a stack's lengths input, checked to lie in [1, time]."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    batch_in = [(v, _dims(v).index("batch")) for v in graph.input if "batch" in _dims(v)]
    if not batch_in:
        return
    time_in = [(v, _dims(v).index("time")) for v in graph.input if "time" in _dims(v)]
    batch_out = [(v, _dims(v).index("batch")) for v in graph.output if "batch" in _dims(v)]
    first, inits = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), PREFIX + name))
        return PREFIX + name

    def node(op, inputs, name, **attrs):
        first.append(helper.make_node(op, inputs, [PREFIX + name], name=attrs.pop("node_name", PREFIX + name),
                                      **attrs))
        return PREFIX + name

    def size(value, axis, label):
        shape = node("Shape", [value.name], f"{label}_shape")
        return node("Gather", [shape, const(f"{label}_axis", np.array([axis], np.int64))], label)  # [1] int64

    def refuse_if(bad, label, node_name):
        """A 0 (int64 scalar) that fails to compute where ``bad``: ``ConstantOfShape`` of [-1], an error naming itself
        ``node_name`` in onnxruntime and OpenVINO alike, else of [1], summed. Its shape comes from the inputs, so no
        runtime folds it away (OpenVINO folded a Reshape probe of a constant, and merged Reshapes in a row)."""
        size = node("Where", [bad, const(f"{label}/negative", np.array([-1], np.int64)),
                              const(f"{label}/one", np.array([1], np.int64))], f"{label}/probe_shape")
        probe = node("ConstantOfShape", [size], f"{label}/probe", node_name=node_name,
                     value=numpy_helper.from_array(np.array([0], np.int64)))
        return node("ReduceSum", [probe], f"{label}/zero", keepdims=0)

    batch = size(*batch_in[0], "batch")
    extra = node("Cast", [node("Equal", [batch, const("zero", np.array([0], np.int64))], "batch_is_zero")],
                 "extra_row", to=TensorProto.INT64)
    if time_in:
        time = size(*time_in[0], "time")
        empty = node("Equal", [time, const("zero_t", np.array([0], np.int64))], "time_is_zero")
        extra = node("Add", [extra, refuse_if(empty, "time", TIME_GUARD)], "extra_row_checked")
    renames = {}
    for value, axis in batch_in:
        rank, elem = len(_dims(value)), value.type.tensor_type.elem_type
        dtype = helper.tensor_dtype_to_np_dtype(elem)
        pads = node("Concat", [const(f"{value.name}/before", np.zeros(rank + axis, np.int64)), extra,
                               const(f"{value.name}/after", np.zeros(rank - axis - 1, np.int64))],
                    f"{value.name}/pads", axis=0)
        fill = 1 if rank == 1 and np.issubdtype(dtype, np.integer) else 0  # a length of the padding row: valid
        renames[value.name] = node("Pad", [value.name, pads, const(f"{value.name}/fill", np.array(fill, dtype))],
                                   f"{value.name}/guarded")
    if lengths in renames and time_in:  # a stack's lengths: each in [1, time], checked on the guarded rows
        given = lengths
        lengths = node("Cast", [renames[given]], "lengths_i64", to=TensorProto.INT64)
        low = node("ReduceMin", [lengths], "shortest", axes=[0], keepdims=1)
        high = node("ReduceMax", [lengths], "longest", axes=[0], keepdims=1)
        bad = node("Or", [node("Less", [low, const("one_l", np.array([1], np.int64))], "below_one"),
                          node("Greater", [high, time], "beyond_time")], "lengths_out_of_range")
        zero = node("Cast", [refuse_if(bad, "lengths", LENGTHS_GUARD)], "lengths_zero_i32", to=TensorProto.INT32)
        renames[given] = node("Add", [renames[given], zero], f"{given}/checked")
    outputs = {v.name: axis for v, axis in batch_out if v.name not in renames}
    inner = {name: PREFIX + f"{name}/unguarded" for name in outputs}
    for n in graph.node:  # the producer writes the unguarded name; the Slice below writes the output's own
        n.output[:] = [inner.get(o, o) for o in n.output]
    _rename(graph, {**renames, **inner})
    last, starts = [], const("starts", np.array([0], np.int64))
    for name, axis in outputs.items():
        last.append(helper.make_node("Slice", [inner[name], starts, batch,
                                               const(f"{name}/axes", np.array([axis], np.int64))], [name],
                                     name=PREFIX + f"{name}/rows"))
    nodes = first + list(graph.node) + last
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(inits)


NODE_GUARD = "empty_batch_or_zero_steps_refused: batch and time must be at least 1, lengths at most time"
SEQUENCE_OPS = ("LSTM", "GRU", "RNN")


def guard_sequence_nodes(graph: "onnx.GraphProto") -> int:
    """A guard in front of each LSTM / GRU / RNN node of ``graph`` (and of the If / Loop / Scan bodies inside it), in
    place, for a graph whose inputs say nothing of which dimension is the batch (the graph road's model.onnx of a
    SavedModel signature, whose dimensions are the signature's): the node itself says it (``layout``), so an empty
    batch, zero steps, or a ``sequence_lens`` above the steps or below 0 fails there with a catchable error from a
    node whose name ends in :data:`NODE_GUARD`, before onnxruntime's kernel can end the process. A length of 0 is let
    through: a Keras mask leaves a fully masked row no step. Otherwise exact (a Reshape of X to its own shape).
    Returns how many nodes were guarded."""
    # lazy: onnx, loaded on first use (import cudnn_port stays light)
    from onnx import TensorProto, helper, numpy_helper

    guarded, nodes = 0, []
    for seq_node in graph.node:
        for body in bodies(seq_node):
            guarded += guard_sequence_nodes(body)
        if seq_node.op_type not in SEQUENCE_OPS:
            nodes.append(seq_node)
            continue
        prefix = f"{PREFIX}{seq_node.name or seq_node.output[0]}/"

        def node(op, inputs, label, **attrs):
            name = attrs.pop("node_name", prefix + label)
            nodes.append(helper.make_node(op, inputs, [prefix + label], name=name, **attrs))
            return prefix + label

        def const(label, value):
            return node("Constant", [], label, value=numpy_helper.from_array(np.asarray(value), prefix + label))

        layout = next((a.i for a in seq_node.attribute if a.name == "layout"), 0)
        x = seq_node.input[0]
        shape = node("Shape", [x], "x_shape")
        steps = node("Gather", [shape, const("time_axis", np.array([1 if layout else 0], np.int64))], "time")
        batch = node("Gather", [shape, const("batch_axis", np.array([0 if layout else 1], np.int64))], "batch")
        zero = const("zero", np.array([0], np.int64))
        bad = node("Or", [node("Equal", [steps, zero], "time_is_zero"), node("Equal", [batch, zero], "batch_is_zero")],
                   "empty")
        if len(seq_node.input) > 4 and seq_node.input[4]:  # sequence_lens: in [0, time] (a 0 appended: never empty)
            lengths = node("Concat", [node("Cast", [seq_node.input[4]], "lengths_i64", to=TensorProto.INT64), zero],
                           "lengths_and_zero", axis=0)
            low = node("ReduceMin", [lengths], "shortest", axes=[0], keepdims=1)
            high = node("ReduceMax", [lengths], "longest", axes=[0], keepdims=1)
            out_of_range = node("Or", [node("Less", [low, zero], "below_zero"),
                                       node("Greater", [high, steps], "beyond_time")], "lengths_out_of_range")
            bad = node("Or", [bad, out_of_range], "refused")
        size = node("Where", [bad, const("negative", np.array([-1], np.int64)),
                              const("one", np.array([1], np.int64))], "probe_shape")
        probe = node("ConstantOfShape", [size], "probe", node_name=prefix + NODE_GUARD,
                     value=numpy_helper.from_array(np.array([0], np.int64)))
        checked = node("Add", [shape, node("ReduceSum", [probe], "probe_zero", keepdims=0)], "x_shape_checked")
        seq_node.input[0] = node("Reshape", [x, checked], "x_checked")
        nodes.append(seq_node)
        guarded += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return guarded
