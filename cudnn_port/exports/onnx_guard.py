"""A guard at an ONNX model's inputs and outputs for the sizes onnxruntime's sequence kernels abort the process on,
and for lengths no runtime agrees on.

onnxruntime 1.31.1's CPU ``LSTM`` and ``GRU`` kernels end the whole process (``std::terminate``: "terminate called
without an active exception", SIGABRT, no Python exception a server could catch) on an empty batch, and its ``GRU``
on zero time steps without ``sequence_lens`` (measured on one bare node: LSTM, batch 0; GRU, batch 0, and time 0
without ``sequence_lens``). So every model.onnx cudnn-port writes (a stack's, a whole model's) carries, where its
inputs have a dynamic dimension named ``batch`` / ``time``:

* **empty batch -> empty outputs.** Each input of a ``batch`` dimension gets one padding row when (and only when)
  the batch is 0 (``Pad`` by ``Where(Equal(B, 0), one row, zeros)``: zeros, or 1 for a rank-1 integer input such
  as ``sequence_lengths``, a valid length), and each output of a ``batch`` dimension is sliced back to the first B
  rows: nothing, for B = 0. Rows are computed apart, so the padding row changes no other row;
* **zero time steps -> a catchable error.** The zeros a ``Pad`` takes when the batch is not empty are a
  ``ConstantOfShape`` of shape ``[-1]`` when the time is 0 (``[2 * rank]`` otherwise), which fails in the node named
  :data:`TIME_GUARD`, whose name says what is wrong, in onnxruntime and OpenVINO alike (a ``Range`` of step 0
  killed OpenVINO 2026.4 with SIGFPE, and OpenVINO folded a ``Reshape`` probe away); a sequence of no steps has no
  last step, so no final state to return.
* **a length outside [1, time] -> a catchable error** (a stack's ``sequence_lengths``): the node named
  :data:`LENGTHS_GUARD` fails the same way. Such lengths have no cuDNN meaning, and each runtime made up its own
  answer (for length 0 onnxruntime, OpenVINO and LiteRT returned three different final states).

For B > 0 and T > 0 all are exact: a ``Pad`` by 0 and a ``Slice`` of all rows copy the values. Each dimension is
read by one ``Shape`` node (``start``/``end``), so a model of one input and one output carries 9 guard nodes, which
onnxruntime cannot fold (they read the input's shape; on a 2-layer BiLSTM stack at batch 1, 21 us of a 528 us call,
docs/runtimes.md). Where an output comes from a head that widens the rows, they are sliced in front of it
(:func:`_narrowest`), so fewer values are copied.
"""
import collections
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .onnx_passes import bodies, read_in_subgraphs

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

    def size(value, axis, label):  # [1] int64, one Shape node reading the dimension itself
        return node("Shape", [value.name], label, start=axis, end=axis + 1)

    def refuse_if(bad, label, node_name, length=1):
        """``length`` zeros (int64) that fail to compute where ``bad``: ``ConstantOfShape`` of [-1], an error naming
        itself ``node_name`` in onnxruntime and OpenVINO alike, else of [length]. Its shape comes from the inputs,
        so no runtime folds it away (OpenVINO folded a Reshape probe of a constant, and merged Reshapes in a row)."""
        size = node("Where", [bad, const(f"{label}/negative", np.array([-1], np.int64)),
                              const(f"{label}/length", np.array([length], np.int64))], f"{label}/probe_shape")
        return node("ConstantOfShape", [size], f"{label}/probe", node_name=node_name,
                    value=numpy_helper.from_array(np.array([0], np.int64)))

    batch = size(*batch_in[0], "batch")
    batch_is_zero = node("Equal", [batch, const("zero", np.array([0], np.int64))], "batch_is_zero")
    time = size(*time_in[0], "time") if time_in else None
    time_is_zero = node("Equal", [time, const("zero_t", np.array([0], np.int64))], "time_is_zero") if time_in \
        else None
    no_pads = {}  # an input's rank -> its Pad's pads when the batch is not empty: zeros, failing on zero steps
    renames = {}
    for value, axis in batch_in:
        rank, elem = len(_dims(value)), value.type.tensor_type.elem_type
        if rank not in no_pads and not time_in:
            no_pads[rank] = const(f"zero_pads_{rank}", np.zeros(2 * rank, np.int64))
        elif rank not in no_pads:  # each rank's own probe; the first bears the guard's name itself
            name = TIME_GUARD if not no_pads else f"{TIME_GUARD} (rank {rank})"
            no_pads[rank] = refuse_if(time_is_zero, f"time_rank_{rank}", name, 2 * rank)
        dtype = helper.tensor_dtype_to_np_dtype(elem)
        one_row = np.zeros(2 * rank, np.int64)
        one_row[rank + axis] = 1  # one row after the last, along the batch axis
        pads = node("Where", [batch_is_zero, const(f"{value.name}/one_row", one_row), no_pads[rank]],
                    f"{value.name}/pads")
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
        probe = refuse_if(bad, "lengths", LENGTHS_GUARD)
        zero = node("Cast", [node("ReduceSum", [probe], "lengths/zero", keepdims=0)], "lengths_zero_i32",
                    to=TensorProto.INT32)
        renames[given] = node("Add", [renames[given], zero], f"{given}/checked")
    outputs = {v.name: axis for v, axis in batch_out if v.name not in renames}
    facts = _graph_facts(graph)
    cuts = {name: _narrowest(graph, facts, name, axis) for name, axis in outputs.items()}
    inner = {name: PREFIX + f"{name}/unguarded" for name, cut in cuts.items() if cut is None}
    for n in graph.node:  # the producer writes the unguarded name; the Slice below writes the output's own
        n.output[:] = [inner.get(o, o) for o in n.output]
    _rename(graph, {**renames, **inner})
    starts, last = const("starts", np.array([0], np.int64)), []
    before: Dict[int, List[Any]] = {}  # {index of a node: the Slice nodes that go in front of it}
    for name, axis in outputs.items():
        cut = cuts[name]
        source, target = (inner[name], name) if cut is None else (cut[1], PREFIX + f"{name}/rows")
        axes = const(f"{name}/axes", np.array([axis], np.int64))
        row_slice = helper.make_node("Slice", [source, starts, batch, axes], [target], name=PREFIX + f"{name}/rows")
        if cut is None:
            last.append(row_slice)
        else:  # in front of the op that widens the rows (its one reader)
            reader = graph.node[cut[0]]
            reader.input[:] = [target if i == source else i for i in reader.input]
            before.setdefault(cut[0], []).append(row_slice)
    nodes = first + [m for k, n in enumerate(graph.node) for m in before.get(k, []) + [n]] + last
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(inits)


Facts = Tuple[Dict[str, Sequence[int]], "collections.Counter[str]", Dict[str, int]]


def _graph_facts(graph: "onnx.GraphProto") -> Facts:
    """What :func:`_narrowest` reads of ``graph``, gathered once for all its outputs: ({constant: its dims}, how many
    times each tensor is read (graph outputs and subgraphs included), {tensor: the index of its producing node})."""
    consts: Dict[str, Sequence[int]] = {t.name: list(t.dims) for t in graph.initializer}
    consts.update({n.output[0]: list(a.t.dims) for n in graph.node if n.op_type == "Constant"
                   for a in n.attribute if a.name == "value"})
    reads = collections.Counter(i for n in graph.node for i in n.input)
    reads.update([o.name for o in graph.output] + sorted(read_in_subgraphs(graph)))
    producer = {o: k for k, n in enumerate(graph.node) for o in n.output}
    return consts, reads, producer


def _narrowest(graph: "onnx.GraphProto", facts: Facts, name: str, axis: int) -> Optional[Tuple[int, str]]:
    """Where output ``name``'s rows are cheapest to slice back: (the reader's index, the tensor it reads) before the
    ``MatMul`` by a constant matrix that widens its rows most, followed to the output only through that ``MatMul`` and
    elementwise ops with a constant of rank 0 or 1 (each row computed apart, the batch axis not the last), each tensor
    read once; None where the output itself is (a Linear head of 1000 classes over 128 units: 1/8 of the copy)."""
    consts, reads, producer = facts
    rank = next(len(v.type.tensor_type.shape.dim) for v in graph.output if v.name == name)
    if rank < 2 or axis == rank - 1 or reads[name] != 1:
        return None
    best, width, tensor = None, 1.0, name
    while tensor in producer:
        index = producer[tensor]
        node = graph.node[index]
        if node.op_type == "MatMul" and len(consts.get(node.input[1], ())) == 2:
            rows_in, rows_out = consts[node.input[1]]
            width, tensor = width * rows_in / max(rows_out, 1), node.input[0]
        elif node.op_type in ("Add", "Sub", "Mul", "Div") and len(consts.get(node.input[1], (0, 0))) <= 1:
            tensor = node.input[0]
        elif node.op_type in ("Add", "Mul") and len(consts.get(node.input[0], (0, 0))) <= 1:
            tensor = node.input[1]
        else:
            break
        if reads[tensor] != 1 or tensor in consts or tensor not in producer:
            break
        if width < (best[2] if best else 1.0):
            best = (index, tensor, width)
    return best[:2] if best else None


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
