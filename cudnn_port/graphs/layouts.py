"""The gate layout of the params a tf_keras GPU function builds for its cuDNN node, found by running that
construction on marker values; a Gather puts them in cuDNN's order where they are not.

tf_keras's ``gpu_gru`` swaps the z and r blocks of ``kernel``, ``recurrent_kernel`` and ``bias`` into cuDNN's
r, z, h only ``if tf.sysconfig.get_build_info()["is_cuda_build"]``, and ``gpu_lstm`` reorders the LSTM gates to
MIOpen's i, f, o, c ``if ... ["is_rocm_build"]`` (docs/conventions.md, section 7). The build that traced a model
is not recorded in it, so the function's own construction is run: each weight the function receives gets distinct
marker values (1, 2, ...), and where each marker lands in ``params`` is compared with where cuDNN wants it, given
the Keras gate order of those weights (LSTM i, f, c, o; GRU z, r, h; the one the standard function serves with).
"""
from typing import Dict, List, Optional

import numpy as np

from ..canonical import CanonicalRNN, LayerParams
from ..errors import UnsupportedError
from ..gates import CUDNN_ORDER, KERAS_GRU, KERAS_LSTM, reorder
from ..layout import pack

WEIGHT_ARGS = ("kernel", "recurrent_kernel", "bias")  # tf_keras's gpu_lstm / gpu_gru (TF 2.0: cudnn_lstm / _gru)


DIGITS = {"float16": 2048}  # markers run in two passes of base-B digits, exact in the params' dtype


def keras_markers(spec) -> List[np.ndarray]:
    """Marker arrays for tf_keras's kernel ``[I, G*H]``, recurrent_kernel ``[H, G*H]`` and bias (LSTM ``[G*H]``,
    GRU ``[2, G*H]``), values 1, 2, ... in that order (float64)."""
    G, H, width = spec.num_gates, spec.num_units, spec.input_size
    shapes = [(width, G * H), (H, G * H), (G * H,) if spec.mode == "lstm" else (2, G * H)]
    out, start = [], 1
    for shape in shapes:
        size = int(np.prod(shape))
        out.append(np.arange(start, start + size, dtype=np.float64).reshape(shape))
        start += size
    return out


def _run_markers(session, params, placeholders, markers):
    """Where the markers land in params: the construction run once per digit (0 stays 0)."""
    dtype = params.dtype.as_numpy_dtype
    base = DIGITS.get(params.dtype.name, 4096)
    passes = []
    high_digit = lambda m: np.where(m > 0, (m - 1) // base + 1, 0)  # noqa: E731
    low_digit = lambda m: np.where(m > 0, (m - 1) % base + 1, 0)  # noqa: E731
    for digit in (high_digit, low_digit):
        feeds = {p: digit(m).astype(dtype) for p, m in zip(placeholders, markers)}
        passes.append(np.asarray(session.run(params, feeds), np.float64).reshape(-1))
    high, low = passes
    return np.where(high > 0, (high - 1) * base + low, 0)


def cudnn_params(spec, kernel, recurrent, bias) -> np.ndarray:
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


def params_permutation(function_def, node_name, spec) -> Optional[np.ndarray]:
    """For a forward cuDNN node of a tf_keras function (params built from its ``kernel``, ``recurrent_kernel`` and
    ``bias`` arguments): the index array ``perm`` with ``params[perm]`` in cuDNN's layout, or None when ``params``
    already is (or the function has no such arguments: params that are not built from Keras weights are taken
    as cuDNN's). Raises UnsupportedError for a construction that no gate permutation explains."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    from ..deps import import_tf

    args = {a.name for a in function_def.signature.input_arg}
    if not set(WEIGHT_ARGS) <= args or spec.num_layers != 1 or spec.bidirectional:
        return None
    tf = import_tf()
    graph_def, _ = function_def_to_graph_def(function_def)
    markers = keras_markers(spec)
    with tf.Graph().as_default() as whole:
        tf.compat.v1.import_graph_def(graph_def, name="")
        params_name = whole.get_operation_by_name(node_name).inputs[3].name
    construction = _ancestors(graph_def, params_name.split(":")[0])
    with tf.Graph().as_default() as graph:  # only what builds params: the cuDNN op has no CPU kernel to place
        tf.compat.v1.import_graph_def(construction, name="")
        params = graph.get_tensor_by_name(params_name)
        placeholders = [graph.get_operation_by_name(name).outputs[0] for name in WEIGHT_ARGS]
        where = f"node {node_name} in {function_def.signature.name}"
        try:
            with tf.compat.v1.Session(graph=graph) as session:
                got = _run_markers(session, params, placeholders, markers)
        except Exception as e:  # noqa: BLE001 (the construction needs more than the weights: cannot tell)
            raise UnsupportedError(f"{where}: cannot tell the gate order of its params, which are not computed from "
                                   f"its kernel, recurrent_kernel and bias alone ({type(e).__name__})") from None
    want = cudnn_params(spec, *markers)
    positions = {value: i for i, value in enumerate(got)}
    if got.size != want.size or any(v not in positions for v in want):
        raise UnsupportedError(f"{where}: its params are built from the Keras weights in a layout that is no gate "
                               "order cudnn-port knows; convert with --formats saved_model (the SavedModel serves "
                               "with the standard function)")
    # 0 marks a constant zero (the LSTM's b_W, which tf_keras passes as zeros): any zero serves, its own place first
    perm = np.array([i if v == 0 and got[i] == 0 else positions[v] for i, v in enumerate(want)], np.int32)
    return None if (perm == np.arange(perm.size)).all() else perm


def _ancestors(graph_def, name):
    """A copy of ``graph_def`` holding only node ``name`` and the nodes it depends on."""
    nodes = {n.name: n for n in graph_def.node}
    keep, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current in keep or current not in nodes:
            continue
        keep.add(current)
        todo += [i.lstrip("^").split(":")[0] for i in nodes[current].input]
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(n for n in graph_def.node if n.name in keep)
    return out


def put_params_in_cudnn_order(proto, nodes) -> Dict[str, str]:
    """Insert (in place) a Gather before each forward cuDNN node of ``nodes`` whose params tf_keras built in another
    layout (:func:`params_permutation`). Returns {"function/node": "reordered"} of the nodes changed."""
    functions = {f.signature.name: f for meta in proto.meta_graphs for f in meta.graph_def.library.function}
    changed = {}
    for node in nodes:
        if node.backward or node.function not in functions:
            continue
        function = functions[node.function]
        perm = params_permutation(function, node.name, node.spec)
        if perm is None:
            continue
        _insert_gather(function, node.name, perm)
        changed[f"{node.function}/{node.name}"] = "params reordered into cuDNN's gate layout"
    return changed


def _insert_gather(function, node_name, perm):
    """In FunctionDef ``function``: node ``node_name``'s params input becomes ``GatherV2(params, perm, 0)``."""
    from ..deps import import_tf

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
