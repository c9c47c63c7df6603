"""The original SavedModel's signature run on CPU with each cuDNN node computed by the NumPy reference.

A SavedModel whose signature calls ``CudnnRNN`` / ``V2`` / ``V3`` cannot run on a CPU as it is: TensorFlow has no
CPU kernel for those ops. To judge its conversion by the original rather than by the conversion's own output, each
forward cuDNN node (in the main graph and in every function) is swapped, in a copy of ``saved_model.pb``, for a
``PyFuncStateless`` node that computes cuDNN's math in NumPy (:func:`cudnn_port.reference.forward`) on the node's
own inputs at run time: the params tensor exactly as the graph feeds it, read through the cuDNN API's layout
(:mod:`.cudnn_api`), the sizes from the inputs' run-time shapes and the node's attributes. Everything around the
node, variables and all, is the original's. Of the rewrite that made ``OUT/saved_model`` (``cudnn_port.graphs``)
only the reading of a node's attributes with its op's defaults (:mod:`cudnn_port.op_attrs`, TensorFlow's registry)
is shared: not the node finder, not the layout, not the CPU function.

The copy lives in a temporary folder beside links to the source's ``variables`` and ``assets``; the source is read,
never written, and its ``saved_model.pb`` is parsed from the very bytes whose sha256 the conversion recorded.
Backward nodes have no reference: in the main graph (a TF1 training graph saved whole) each becomes a PyFunc that
raises if it is ever run, so that the session can be made; a signature that runs one cannot be judged this way and
its row says so.
"""
import hashlib
import os
import tempfile
from typing import Any, Dict, List, Optional

import numpy as np

from ..deps import import_tf
from ..op_attrs import node_attrs
from .. import reference
from ..layout import RNNSpec
from .cudnn_api import canonical

FORWARD = ("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3")
BACKWARD = ("CudnnRNNBackprop", "CudnnRNNBackpropV2", "CudnnRNNBackpropV3")


def node_outputs(attrs: Dict[str, Any], x: np.ndarray, h: np.ndarray, c: np.ndarray, params: np.ndarray,
                 lengths: Any = None) -> List[np.ndarray]:
    """cuDNN's forward op on these inputs in the op's own layouts: [output, output_h, output_c, reserve_space]
    (and host_reserved for V2 / V3, empty as reserve_space is: only cuDNN's backward op reads them)."""
    time_major = attrs.get("time_major", True) is not False
    directions = 2 if attrs["direction"] == "bidirectional" else 1
    proj = int(attrs.get("num_proj") or 0)
    dtype = params.dtype
    if not time_major:  # batch-major V3: x [B, T, I], states [B, L*D, S]
        h, c = np.swapaxes(h, 0, 1), (np.swapaxes(c, 0, 1) if c.ndim == 3 else c)
    x_bm = np.swapaxes(x, 0, 1) if time_major else x
    units = c.shape[-1] if proj else h.shape[-1]
    input_mode = attrs.get("input_mode", "linear_input")
    if input_mode == "skip_input" or (input_mode == "auto_select" and x.shape[-1] == h.shape[-1]):
        raise ValueError(f"input_mode={input_mode} (no input weights) has no reference")
    spec = RNNSpec(attrs["rnn_mode"], h.shape[0] // directions, units, x.shape[-1], directions == 2, dtype.name,
                   num_proj=proj)
    lstm = spec.mode == "lstm"
    y, h_n, c_n = reference.forward(canonical(spec, params), x_bm, None if lengths is None else np.asarray(lengths),
                                    h, c if lstm else None)
    y = np.swapaxes(y, 0, 1) if time_major else y
    h_n = h_n if time_major else np.swapaxes(h_n, 0, 1)
    c_n = (c_n if time_major else np.swapaxes(c_n, 0, 1)) if lstm and c_n is not None else \
        np.zeros(np.shape(c), dtype)  # unread (GRU)
    return [np.ascontiguousarray(a, dtype=dtype) for a in (y, h_n, c_n)] + [np.zeros([0], dtype)]


class _Swapper:
    """Makes the PyFunc nodes; their Python functions stay registered while this object lives."""

    def __init__(self) -> None:
        self.tf = import_tf()
        self.graphs: List[Any] = []  # the graphs that hold each registered function

    def pyfunc(self, node, op_def) -> Any:
        """A PyFuncStateless NodeDef with ``node``'s name and inputs that returns what ``node`` returns (a backward
        node: raises when run)."""
        tf = self.tf
        attrs = node_attrs(node)
        T = tf.as_dtype(attrs["T"])
        tin = [tf.as_dtype(a.type) if not a.type_attr else T for a in op_def.input_arg]
        tout = [tf.as_dtype(a.type) if not a.type_attr else T for a in op_def.output_arg]

        def run(*args):
            if node.op in BACKWARD:
                raise ValueError(f"{node.op} (cuDNN's backward op) has no reference to stand in for it")
            outputs = node_outputs(attrs, *args)
            return outputs + [np.zeros([0], np.int8)] * (len(tout) - len(outputs))

        graph = tf.Graph()
        with graph.as_default():
            holders = [tf.compat.v1.placeholder(d) for d in tin]
            template = tf.numpy_function(run, holders, tout, stateful=False)[0].op.node_def
        self.graphs.append(graph)
        swapped = type(node)()
        swapped.CopyFrom(template)
        swapped.name = node.name
        del swapped.input[:]
        swapped.input.extend(node.input)
        return swapped

    def swap(self, nodes, in_function: bool, returns=None) -> None:
        """Swaps every forward cuDNN node of ``nodes`` (a repeated NodeDef field), and in the main graph every
        backward one; in a function body, rewires consumers' ``node:output_h:0`` to the PyFunc's
        ``node:output:1``."""
        # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
        from tensorflow.python.framework import op_def_registry

        renames: Dict[str, str] = {}
        for i, node in enumerate(nodes):
            if node.op in FORWARD or (node.op in BACKWARD and not in_function):
                op_def = op_def_registry.get(node.op)
                for k, arg in enumerate(op_def.output_arg):
                    renames[f"{node.name}:{arg.name}:0"] = f"{node.name}:output:{k}"
                nodes[i].CopyFrom(self.pyfunc(node, op_def))
        if in_function and renames:
            for node in nodes:
                for j, ref in enumerate(node.input):
                    if ref in renames:
                        node.input[j] = renames[ref]
            for key in list(returns or ()):
                if returns[key] in renames:
                    returns[key] = renames[returns[key]]


def original_with_reference(source: str, signature: str, feeds: Dict[str, np.ndarray],
                            sha256: Optional[str] = None) -> Dict[str, np.ndarray]:
    """{output name: value} of the SavedModel folder ``source``'s ``signature`` on ``feeds``, with every forward
    cuDNN node computed by the NumPy reference. ``sha256``: what its ``saved_model.pb`` must hash to (the bytes
    parsed are the bytes checked). Raises what TensorFlow raises (a backward node run, for one)."""
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.core.protobuf import saved_model_pb2

    tf = import_tf()
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(source, "saved_model.pb"), "rb") as f:
        data = f.read()
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError("its saved_model.pb changed since the conversion checked it")
    proto.ParseFromString(data)
    swapper = _Swapper()
    for meta in proto.meta_graphs:
        swapper.swap(meta.graph_def.node, False)
        for function in meta.graph_def.library.function:
            swapper.swap(function.node_def, True, function.ret)
    with tempfile.TemporaryDirectory(prefix="cudnn_port_judge_") as tmp:
        with open(os.path.join(tmp, "saved_model.pb"), "wb") as f:
            f.write(proto.SerializeToString())
        for part in ("variables", "assets"):
            if os.path.isdir(os.path.join(source, part)):
                os.symlink(os.path.abspath(os.path.join(source, part)), os.path.join(tmp, part))
        config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
        with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph, config=config) as session:
            meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], tmp, clear_devices=True)
            sig = meta.signature_def[signature]
            return session.run({k: v.name for k, v in sig.outputs.items()},
                               {sig.inputs[k].name: v for k, v in feeds.items() if k in sig.inputs})

