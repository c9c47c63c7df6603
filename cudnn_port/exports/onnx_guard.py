"""A guard at an ONNX model's inputs and outputs for the sizes onnxruntime's sequence kernels abort the process on.

onnxruntime 1.31.1's CPU ``LSTM`` and ``GRU`` kernels end the whole process (``std::terminate``: "terminate called
without an active exception", SIGABRT, no Python exception a server could catch) on an empty batch, and its ``GRU``
on zero time steps without ``sequence_lens`` (measured on one bare node: LSTM, batch 0; GRU, batch 0, and time 0
without ``sequence_lens``). So every model.onnx cudnn-port writes (a stack's, a whole model's) carries, where its
inputs have a dynamic dimension named ``batch`` / ``time``:

* **empty batch -> empty outputs.** Each input of a ``batch`` dimension gets one padding row when (and only when)
  the batch is 0 (``Pad`` by ``Cast(Equal(B, 0))``: zeros, or 1 for a rank-1 integer input such as
  ``sequence_lengths``, a valid length), and each output of a ``batch`` dimension is sliced back to the first B
  rows: nothing, for B = 0. Rows are computed apart, so the padding row changes no other row;
* **zero time steps -> a catchable error.** A ``Reshape`` of one element to ``[-1, -1]`` when the time is 0 (to
  ``[1]`` otherwise) fails in the node named :data:`TIME_GUARD`, whose name says what is wrong, in onnxruntime and
  OpenVINO alike (a ``Range`` of step 0 killed OpenVINO 2026.4 with SIGFPE); a sequence of no steps has no last
  step, so no final state to return.

For B > 0 and T > 0 both are exact: a ``Pad`` by 0 and a ``Slice`` of all rows copy the values.
"""
from typing import TYPE_CHECKING, Dict, List

import numpy as np

from .onnx_passes import bodies

if TYPE_CHECKING:
    import onnx

PREFIX = "empty_guard/"
TIME_GUARD = PREFIX + "zero_length_input_refused: time must be at least 1"


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


def guard_empty(model: "onnx.ModelProto") -> None:
    """Add the guard of the module docstring to ``model`` in place (nothing where no input has a ``batch``
    dimension)."""
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

    batch = size(*batch_in[0], "batch")
    extra = node("Cast", [node("Equal", [batch, const("zero", np.array([0], np.int64))], "batch_is_zero")],
                 "extra_row", to=TensorProto.INT64)
    if time_in:
        time = size(*time_in[0], "time")
        empty = node("Equal", [time, const("zero_t", np.array([0], np.int64))], "time_is_zero")
        target = node("Where", [empty, const("no_shape", np.array([-1, -1], np.int64)),
                                const("one_row", np.array([1], np.int64))], "time_probe_shape")
        probe = node("Reshape", [const("probe", np.array([0], np.int64)), target], "time_probe",
                     node_name=TIME_GUARD)
        zero = node("ReduceSum", [probe], "time_probe_sum", keepdims=0)  # 0: ties the probe to every input
        extra = node("Add", [extra, zero], "extra_row_checked")
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
