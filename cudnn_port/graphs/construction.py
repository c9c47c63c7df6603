"""The construction of a cuDNN node's params, cut out of its function so that it runs alone, on marker values
(:mod:`.layouts`): the nodes ``params`` is computed from (:func:`ancestors`, data edges only), the Keras weights
among them found by their shapes (:func:`weight_sources`), and those weights made Placeholders
(:func:`as_placeholders`; variable handles passed as arguments: :func:`read_weight_handles`).
"""
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Tuple

from ..deps import import_tf

if TYPE_CHECKING:
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2, node_def_pb2


def read_weight_handles(graph_def: "graph_pb2.GraphDef", names: Iterable[str]) -> None:
    """In place: each weight argument of ``names`` (a Placeholder of the function's graph) that is a variable's
    handle, read only by ``ReadVariableOp`` (tf.keras 2.0 passed the layer's variables to ``cudnn_lstm`` /
    ``cudnn_gru`` so), becomes a Placeholder of the value's dtype, and its reads Identity ops: the construction then
    runs on marker values."""
    tf = import_tf()
    resource, arguments = tf.resource.as_datatype_enum, set(names)
    for arg in (n for n in graph_def.node if n.op == "Placeholder" and n.name in arguments):
        if arg.attr["dtype"].type != resource:
            continue
        readers = [n for n in graph_def.node if any(i.split(":")[0] == arg.name for i in n.input)]
        if not readers or any(n.op != "ReadVariableOp" for n in readers) or \
                len({n.attr["dtype"].type for n in readers}) != 1:
            continue
        arg.attr["dtype"].type = readers[0].attr["dtype"].type
        for stale in ("shape", "_output_shapes", "_handle_data", "_user_specified_name"):
            arg.attr.pop(stale, None)
        for node in readers:
            node.op = "Identity"
            node.attr["T"].type = node.attr["dtype"].type
            del node.attr["dtype"]


def weight_sources(construction: "graph_pb2.GraphDef", whole: "tf.Graph",
                   shapes: Dict[str, tuple]) -> Optional[Dict[str, List[str]]]:
    """{role: node names} of the nodes in ``construction`` (params and what it depends on) whose output has the shape
    of Keras weight ``role`` (``shapes``: {role: shape}, roles ``kernel``, ``recurrent_kernel``, ``bias``): variable
    reads, float arguments, constants that are not one value repeated (TensorFlow folds ``zeros_like(bias)`` into
    one). ``whole``: the function's graph imported, for each node's output dtype and shape. None unless a kernel and a
    recurrent kernel are found."""
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.python.framework import tensor_util

    roles: Dict[str, List[str]] = {role: [] for role in shapes}
    for node in construction.node:
        if node.op == "Const":
            value = tensor_util.MakeNdarray(node.attr["value"].tensor)
            if value.size == 0 or (value == value.reshape(-1)[0]).all():
                continue
        elif node.op not in ("ReadVariableOp", "Placeholder"):
            continue
        output = whole.get_operation_by_name(node.name).outputs[0]
        if not output.dtype.is_floating:
            continue
        shape = tuple(output.shape) if output.shape.rank is not None else _declared_shape(node)
        for role, wanted in shapes.items():
            if shape == wanted:
                roles[role].append(node.name)
    return roles if roles["kernel"] and roles["recurrent_kernel"] else None


def _declared_shape(node: "node_def_pb2.NodeDef") -> Optional[Tuple[int, ...]]:
    """The shape a node's ``_output_shapes`` attribute declares for its first output (what a SavedModel's function
    records for a variable read), or None."""
    shapes = node.attr["_output_shapes"].list.shape if "_output_shapes" in node.attr else []
    if not shapes or shapes[0].unknown_rank or any(d.size < 0 for d in shapes[0].dim):
        return None
    return tuple(d.size for d in shapes[0].dim)


def as_placeholders(graph_def: "graph_pb2.GraphDef", names: Iterable[str],
                    whole: "tf.Graph") -> "graph_pb2.GraphDef":
    """A copy of ``graph_def`` where each node of ``names`` is a Placeholder of its output's dtype (read from
    ``whole``, the graph it was imported into)."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    chosen = set(names)
    for node in out.node:
        if node.name in chosen and node.op != "Placeholder":
            dtype = whole.get_operation_by_name(node.name).outputs[0].dtype
            node.op = "Placeholder"
            del node.input[:]
            node.attr.clear()
            node.attr["dtype"].type = dtype.as_datatype_enum
    return out


def ancestors(graph_def: "graph_pb2.GraphDef", name: str) -> "graph_pb2.GraphDef":
    """A copy of ``graph_def`` holding only node ``name`` and the nodes whose values it is computed from, control
    edges left out (a read that waits on an assertion over the inputs reads the same value)."""
    nodes = {n.name: n for n in graph_def.node}
    keep, todo = set(), [name]
    while todo:
        current = todo.pop()
        if current in keep or current not in nodes:
            continue
        keep.add(current)
        todo += [i.split(":")[0] for i in nodes[current].input if not i.startswith("^")]
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for node in graph_def.node:
        if node.name in keep:
            kept = out.node.add()
            kept.CopyFrom(node)
            del kept.input[:]
            kept.input.extend(i for i in node.input if not i.startswith("^"))
    return out
