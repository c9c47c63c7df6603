"""The gate layout of the params a Keras function builds for its cuDNN node, found by running that construction
on marker values; a Gather puts them in cuDNN's order where they are not.

tf_keras's ``gpu_gru`` and Keras 3's ``_cudnn_gru`` swap the z and r blocks of ``kernel``, ``recurrent_kernel`` and
``bias`` into cuDNN's r, z, h only ``if tf.sysconfig.get_build_info()["is_cuda_build"]``, and their LSTM
counterparts reorder the gates to MIOpen's i, f, o, c ``if ... ["is_rocm_build"]`` (docs/conventions.md, section
7). The build that traced a model is not recorded in it, so the function's own construction is run: each weight
it is built from (tf_keras: the function's arguments; Keras 3: the layer's variables, read inline, or the
constants freezing left) gets distinct marker values (1, 2, ...), and where each marker lands in ``params`` is
compared with where cuDNN wants it, given the Keras gate order of those weights (LSTM i, f, c, o; GRU z, r, h;
the one Keras' CPU path computes with). Only whole gate blocks may move, each within its matrix or bias. The
construction is what ``params`` computes from (its data inputs, not control edges: they order, never change, a
value; :mod:`.construction` cuts it out of the function). Where it needs more than the weights
(:class:`LayoutUnknown`), the GPU alternative's layout is chosen by the original's own outputs instead
(:mod:`.layout_choice`).
"""
import itertools
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

import numpy as np

from ..canonical import CanonicalRNN, LayerParams
from ..errors import UnsupportedError
from ..gates import CUDNN_ORDER, KERAS_GRU, KERAS_LSTM, reorder
from ..layout import pack
from ..deps import import_tf
from .construction import ancestors, as_placeholders, read_weight_handles, weight_sources

if TYPE_CHECKING:
    from ..graphs.nodes import CudnnNode
    from ..layout import RNNSpec
    from tensorflow.core.framework import function_pb2
    from tensorflow.core.protobuf import saved_model_pb2

WEIGHT_ARGS = ("kernel", "recurrent_kernel", "bias")  # tf_keras's gpu_lstm / gpu_gru (TF 2.0: cudnn_lstm / _gru)


DIGITS = {"float16": 2048}  # markers run in two passes of base-B digits, exact in the params' dtype


class LayoutUnknown(UnsupportedError):
    """The marker run cannot tell the layout of a cuDNN node's params (the construction needs more than the Keras
    weights). ``key``: ``"function/node"``; ``candidates``: {name: the index array that gathers params into cuDNN's
    layout, or None for params already in it}, one per build that Keras traces differently (:func:`candidates`)."""

    def __init__(self, message: str, key: str, candidates: Dict[str, Optional[np.ndarray]]):
        super().__init__(message)
        self.key, self.candidates = key, candidates


BUILT_IN = {"lstm": {"MIOpen's i, f, o, c (a ROCm build)": "ifoc"},  # besides cuDNN's own (a CUDA build)
            "gru": {"Keras' z, r, h (a build without CUDA)": KERAS_GRU}}


def candidates(spec: "RNNSpec") -> Dict[str, Optional[np.ndarray]]:
    """{name: ``perm``} of each layout Keras builds a one-layer node's params in: cuDNN's own (None: no gather) and
    the other build's (:data:`BUILT_IN`), whose ``params[perm]`` is in cuDNN's layout: each gate block moved within
    its W, R, b_W or b_R."""
    order = CUDNN_ORDER[spec.mode]
    found: Dict[str, Optional[np.ndarray]] = {f"cuDNN's {', '.join(order)} (a CUDA build)": None}
    for name, built in BUILT_IN.get(spec.mode, {}).items():
        perm = np.arange(spec.param_count)
        for block in spec.blocks():
            index = np.arange(block.offset, block.end).reshape(block.shape[0], -1)
            perm[block.offset:block.end] = reorder(index, built, order).reshape(-1)
        found[name] = perm.astype(np.int32)
    return found


def _run_markers(session, params, placeholders, markers):
    """Where the markers land in params: the construction run once per digit (0 stays 0)."""
    base = DIGITS.get(params.dtype.name, 4096)
    passes = []
    high_digit = lambda m: np.where(m > 0, (m - 1) // base + 1, 0)
    low_digit = lambda m: np.where(m > 0, (m - 1) % base + 1, 0)
    for digit in (high_digit, low_digit):
        feeds = {p: digit(m).astype(p.dtype.as_numpy_dtype) for p, m in zip(placeholders, markers)}
        passes.append(np.asarray(session.run(params, feeds), np.float64).reshape(-1))
    high, low = passes
    return np.where(high > 0, (high - 1) * base + low, 0)


def cudnn_params(spec: "RNNSpec", kernel: np.ndarray, recurrent: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """The cuDNN buffer that computes what Keras computes with these weights: W_g = kernel's gate-g columns,
    transposed; LSTM: b_W = 0, b_R = bias (what tf_keras passes); GRU: b_W = bias[0], b_R = bias[1]."""
    order = CUDNN_ORDER[spec.mode]
    keras = KERAS_LSTM if spec.mode == "lstm" else KERAS_GRU
    G, H = spec.num_gates, spec.num_units
    W = reorder(kernel.T, keras, order).reshape(G, H, -1)
    R = reorder(recurrent.T, keras, order).reshape(G, H, -1)
    if spec.mode == "lstm":
        b_W, b_R = np.zeros((G, H)), reorder(bias, keras, order).reshape(G, H)
    else:
        b_W, b_R = (reorder(b, keras, order).reshape(G, H) for b in bias)
    return pack(CanonicalRNN(spec, [LayerParams(W, R, b_W, b_R)]), dtype="float64")


def keras_shapes(spec: "RNNSpec") -> Dict[str, tuple]:
    """The shapes of Keras' weights of one layer: kernel ``[I, G*H]``, recurrent_kernel ``[H, G*H]``, bias (LSTM
    ``[G*H]``, GRU ``[2, G*H]``)."""
    G, H = spec.num_gates, spec.num_units
    bias = (G * H,) if spec.mode == "lstm" else (2, G * H)
    return dict(zip(WEIGHT_ARGS, [(spec.input_size, G * H), (H, G * H), bias]))


def params_permutation(function_def: "function_pb2.FunctionDef", node_name: str,
                       spec: "RNNSpec") -> Optional[np.ndarray]:
    """For a forward cuDNN node whose params a Keras function builds from the layer's weights: the index array
    ``perm`` with ``params[perm]`` in cuDNN's layout, or None when ``params`` already is (or is not built from
    Keras weights: such params are taken as cuDNN's). The weights are tf_keras's ``kernel``, ``recurrent_kernel``
    and ``bias`` arguments where the function has them, else the variable reads, arguments or constants of Keras'
    weight shapes (:func:`keras_shapes`) that params is computed from (Keras 3 builds params inline, from its
    variables). Raises UnsupportedError for a construction that no gate permutation explains, and
    :class:`LayoutUnknown` for one that needs more than the weights to run."""
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    if spec.num_layers != 1 or spec.bidirectional or spec.num_proj:
        return None
    tf = import_tf()
    graph_def, _ = function_def_to_graph_def(function_def)
    read_weight_handles(graph_def, WEIGHT_ARGS)
    with tf.Graph().as_default() as whole:
        tf.compat.v1.import_graph_def(graph_def, name="")
        params_name = whole.get_operation_by_name(node_name).inputs[3].name
    construction = ancestors(graph_def, params_name.split(":")[0])
    arguments = set(WEIGHT_ARGS) <= {a.name for a in function_def.signature.input_arg}
    weights = keras_shapes(spec)
    roles = {name: [name] for name in WEIGHT_ARGS} if arguments else weight_sources(construction, whole, weights)
    if roles is None:
        return None
    sources = sorted({name for names in roles.values() for name in names})
    construction = ancestors(as_placeholders(construction, sources, whole), params_name.split(":")[0])
    where = f"node {node_name} in {function_def.signature.name}"
    shapes = {name: weights[role] for role, names in roles.items() for name in names}
    markers, start = {}, 1
    for name in sources:  # distinct values 1, 2, ... for every element of every source
        size = int(np.prod(shapes[name]))
        markers[name] = np.arange(start, start + size, dtype=np.float64).reshape(shapes[name])
        start += size
    with tf.Graph().as_default() as graph:  # only what builds params: the cuDNN op has no CPU kernel to place
        tf.compat.v1.import_graph_def(construction, name="")
        params = graph.get_tensor_by_name(params_name)
        feeds = [graph.get_operation_by_name(name).outputs[0] for name in sources]
        try:
            with tf.compat.v1.Session(graph=graph) as session:
                got = _run_markers(session, params, feeds, [markers[name] for name in sources])
        except Exception as e:  # noqa: BLE001 (the construction needs more than the weights: cannot tell)
            raise LayoutUnknown(f"{where}: cannot tell the gate order of its params, which are not computed from "
                                f"its Keras weights alone ({type(e).__name__})",
                                f"{function_def.signature.name}/{node_name}", candidates(spec)) from None
    found = set()
    biases: List[Optional[str]] = list(roles["bias"]) or [None]  # kernels and recurrent kernels: always found
    for kernel, recurrent, bias in itertools.product(roles["kernel"], roles["recurrent_kernel"], biases):
        names = [name for name in (kernel, recurrent, bias) if name]
        if len(set(names)) < len(names):
            continue  # one source in two roles (I == H: kernel and recurrent kernel have one shape)
        zeros = np.zeros(weights["bias"])
        perm = _gate_permutation(spec, got, cudnn_params(spec, markers[kernel], markers[recurrent],
                                                         zeros if bias is None else markers[bias]))
        if perm is not None:
            found.add(tuple(perm))
    if len(found) != 1:
        escape = ("convert with --formats saved_model (the SavedModel serves with the standard function)" if arguments
                  else "export the model again from Keras on a host without a GPU (Keras then traces its CPU path)")
        raise UnsupportedError(f"{where}: its params are built from the Keras weights in a layout that is no gate "
                               f"order cudnn-port knows{' (several fit)' if found else ''}; {escape}")
    perm = np.array(found.pop(), np.int32)
    return None if (perm == np.arange(perm.size)).all() else perm


def _gate_permutation(spec, got, want) -> Optional[np.ndarray]:
    """``perm`` with ``got[perm] == want`` that moves whole gate blocks within each of W, R, b_W and b_R (where
    ``want`` is not all zeros there), or None if there is none. got, want: ``[param_count]`` marker values."""
    nonzero = want[want != 0]
    if got.size != want.size or set(got[got != 0]) != set(nonzero) or nonzero.size != np.unique(nonzero).size:
        return None
    positions = {value: i for i, value in enumerate(got)}
    if 0 in set(want) and 0 not in positions:
        return None
    perm = np.array([positions[v] for v in want], np.int64)
    stay = (want == 0) & (got == 0)  # a zero where one is wanted stays (LSTM's b_W = 0): no Gather for nothing
    perm[stay] = np.flatnonzero(stay)
    for block in spec.blocks():
        if not want[block.offset:block.end].any():
            continue  # all zeros (LSTM's b_W): any zero serves
        gates = perm[block.offset:block.end].reshape(block.shape[0], -1)
        size = gates.shape[1]
        starts = gates[:, 0]
        if (gates - starts[:, None] != np.arange(size)).any() or ((starts - block.offset) % size).any() or \
                (starts < block.offset).any() or (starts >= block.end).any():
            return None
    return perm


def put_params_in_cudnn_order(proto: "saved_model_pb2.SavedModel", nodes: "Sequence[CudnnNode]",
                              chosen: Optional[Dict[str, Optional[np.ndarray]]] = None,
                              unknown: Optional[List[LayoutUnknown]] = None) -> Dict[str, str]:
    """Insert (in place) a Gather before each forward cuDNN node of ``nodes`` whose params tf_keras built in another
    layout (:func:`params_permutation`). Returns {"function/node": "reordered"} of the nodes changed. ``chosen``:
    {"function/node": perm or None} decided elsewhere (:mod:`.layout_choice`), taken as given; ``unknown``, a list,
    receives each :class:`LayoutUnknown` instead of its being raised (that node is left as it is)."""
    functions = {f.signature.name: f for meta in proto.meta_graphs for f in meta.graph_def.library.function}
    changed = {}
    for node in nodes:
        if node.backward or node.function not in functions:
            continue
        function, key = functions[node.function], f"{node.function}/{node.name}"
        try:
            perm = chosen[key] if chosen and key in chosen else params_permutation(function, node.name, node.spec)
        except LayoutUnknown as e:
            if unknown is None:
                raise
            unknown.append(e)
            continue
        if perm is None:
            continue
        _insert_gather(function, node.name, perm)
        changed[key] = "params reordered into cuDNN's gate layout"
    return changed


def _insert_gather(function, node_name, perm):
    """In FunctionDef ``function``: node ``node_name``'s params input becomes ``GatherV2(params, perm, 0)``."""
    tf = import_tf()
    target = next(n for n in function.node_def if n.name == node_name)
    dtype = target.attr["T"].type
    base = f"{node_name}_cudnn_port_layout"
    index = function.node_def.add(name=f"{base}_perm", op="Const")
    index.attr["dtype"].type = tf.int32.as_datatype_enum
    index.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(perm))
    axis = function.node_def.add(name=f"{base}_axis", op="Const")
    axis.attr["dtype"].type = tf.int32.as_datatype_enum
    axis.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.int32(0)))
    gather = function.node_def.add(name=f"{base}_params", op="GatherV2",
                                   input=[target.input[3], f"{index.name}:output:0", f"{axis.name}:output:0"])
    gather.attr["Tparams"].type = dtype
    gather.attr["Tindices"].type = tf.int32.as_datatype_enum
    gather.attr["Taxis"].type = tf.int32.as_datatype_enum
    gather.attr["batch_dims"].i = 0
    target.input[3] = f"{gather.name}:output:0"
