"""OUT/frozen_graph.pb of a converted SavedModel whose signature holds lookup tables (a raw-text model's
TextVectorization): the whole signature, strings in, variables frozen into constants and each table's contents
written into the graph, for TF1-style sessions.

tf2onnx's freezing (the one model.onnx is cut from, so tensor names agree) keeps the ``HashTableV2`` nodes but not
what filled them (the SavedModel's init op read the assets). Here each table gets ``LookupTableImportV2`` of its keys
and values as constants, all grouped under one op, ``init_all_tables`` (the name ``tf.compat.v1.tables_initializer``
gives it): run it once, then the outputs::

    graph_def = tf.compat.v1.GraphDef.FromString(open("OUT/frozen_graph.pb", "rb").read())
    tf.import_graph_def(graph_def, name="")
    session.run("init_all_tables")
    session.run(manifest["graphdef_nodes"]["outputs"], {manifest["graphdef_nodes"]["inputs"][name]: strings})

The numeric part's input (manifest ``onnx_input``, ``replaces``) is a tensor of this graph: fetch it to get the ids
model.onnx takes.
"""
from typing import TYPE_CHECKING, Any, Callable, Dict, Sequence, Tuple

from ..deps import import_tf

if TYPE_CHECKING:
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import saved_model_pb2

INIT = "init_all_tables"


def has_tables(proto: "saved_model_pb2.SavedModel") -> bool:
    """Whether a function of the SavedModel ``proto`` holds a lookup table op."""
    return any("LookupTable" in n.op or "HashTable" in n.op for m in proto.meta_graphs
               for f in m.graph_def.library.function for n in f.node_def)


def frozen_signature(saved_model: str, signature: str) -> "Tuple[graph_pb2.GraphDef, Dict[str, str], Dict[str, str]]":
    """(GraphDef with :data:`INIT`, {signature input: tensor name}, {signature output: tensor name})."""
    # lazy: tf2onnx, loaded on first use (import cudnn_port stays light)
    from tf2onnx import tf_loader

    tf = import_tf()
    frozen, inputs, outputs, tables, renames = tf_loader.from_saved_model(
        saved_model, None, None, signatures=[signature], return_initialized_tables=True,
        return_tensors_to_rename=True)
    imports = []
    for node in list(frozen.node):
        name = node.attr["shared_name"].s if node.op == "HashTableV2" else None
        if name not in tables:
            continue
        consts = []
        for role, value in zip(("keys", "values"), tables[name]):
            const = frozen.node.add(name=f"{node.name}/{INIT}_{role}", op="Const")
            const.attr["dtype"].type = tf.as_dtype(value.dtype if value.dtype != object else tf.string).as_datatype_enum
            const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
            consts.append(const)
        load = frozen.node.add(name=f"{node.name}/{INIT}", op="LookupTableImportV2",
                               input=[node.name] + [c.name for c in consts])
        load.attr["Tin"].type, load.attr["Tout"].type = (c.attr["dtype"].type for c in consts)
        imports.append(load.name)
    frozen.node.add(name=INIT, op="NoOp", input=[f"^{name}" for name in imports])
    return frozen, {renames.get(n, n.split(":")[0]): n for n in inputs}, \
        {renames.get(n, n.split(":")[0]): n for n in outputs}


def write_frozen(saved_model: str, path: str, signature: str) -> Dict[str, Any]:
    """Write ``signature`` of ``saved_model`` frozen at ``path``; returns the manifest's ``graphdef_nodes``."""
    graph_def, inputs, outputs = frozen_signature(saved_model, signature)
    with open(path, "wb") as f:
        f.write(graph_def.SerializeToString())
    return {"inputs": inputs, "outputs": outputs, "init": INIT, "signature": signature}


def run_frozen(path: str, nodes: Dict[str, Any], feeds: Dict[str, Any], extra: Sequence[str] = ()) -> Dict[str, Any]:
    """{output name: value, and each tensor of ``extra`` by its name} of frozen_graph.pb at ``path`` on ``feeds``
    (signature input names), its tables initialised first."""
    return open_frozen(path, nodes, extra)(feeds)


def open_frozen(path: str, nodes: Dict[str, Any], extra: Sequence[str] = ()
                ) -> Callable[[Dict[str, Any]], Dict[str, Any]]:
    """:func:`run_frozen` as ``run(feeds)``: the graph imported and its tables initialised once, for many runs."""
    graph_def = import_tf().compat.v1.GraphDef()
    with open(path, "rb") as f:
        graph_def.ParseFromString(f.read())
    return graph_runner(graph_def, nodes, extra)


def graph_runner(graph_def: "graph_pb2.GraphDef", nodes: Dict[str, Any],
                 extra: Sequence[str] = ()) -> Callable[[Dict[str, Any]], Dict[str, Any]]:
    """``run(feeds)`` of a GraphDef in one TF1 session, its ``init`` op run once first."""
    tf = import_tf()
    with tf.Graph().as_default() as graph:
        tf.compat.v1.import_graph_def(graph_def, name="")
    fetches = dict(nodes["outputs"], **{name: name for name in extra})
    session = tf.compat.v1.Session(graph=graph)
    session.run(nodes["init"])
    return lambda feeds: session.run(fetches, {nodes["inputs"][k]: v for k, v in feeds.items()
                                               if k in nodes["inputs"]})
