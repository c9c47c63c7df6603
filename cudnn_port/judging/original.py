"""verify's rows for a converted SavedModel judged by the original: the source's own signature run on CPU.

- :func:`original_outputs`: the source SavedModel's signature in a ``tf.compat.v1`` session on CPU (Grappler swaps
  each GPU function for its CPU twin; the session loader also runs what ``tf.saved_model.load`` cannot restore,
  e.g. tf.keras 2.x optimizer slots), the tables initialised from its own assets;
- :func:`original_judge`: those outputs as verify's judge of every artifact of the graph road, or why not. An
  original that calls cuDNN nodes runs with each one computed by the NumPy reference
  (:func:`.cudnn_nodes.original_with_reference`).
"""
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import numpy as np

from ..deps import import_tf
from .cudnn_nodes import original_with_reference
from .graph_inputs import could_not_run

if TYPE_CHECKING:
    from ..manifest import Manifest

def original_outputs(source: str, signature: str, feeds: Dict[str, np.ndarray]) -> Optional[Dict[str, np.ndarray]]:
    """{output name: value} of ``signature`` of the SavedModel folder ``source`` on ``feeds``, or None where the
    folder is gone."""
    if not os.path.isdir(source):
        return None
    tf = import_tf()
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], source)
        sig = meta.signature_def[signature]
        return session.run({k: v.name for k, v in sig.outputs.items()},
                           {sig.inputs[k].name: v for k, v in feeds.items() if k in sig.inputs})


def original_judge(manifest: "Manifest", signature: str, feeds: Dict[str, np.ndarray],
                   unchanged: bool = True) -> Tuple[Optional[Dict[str, np.ndarray]], List[Dict[str, Any]]]:
    """(the original's outputs of ``signature`` on ``feeds``, or None where it cannot judge; rows saying why not).
    An original whose signature calls cuDNN nodes (which have no CPU kernel) runs with each computed by the NumPy
    reference; one whose files changed since the conversion checked them (``unchanged`` False) or whose called
    cuDNN nodes read params in another platform's gate layout is not run, and a row says why; so is one that
    raises. Such a row is ``unjudged``: verify fails it unless the user accepts unjudged rows."""
    def not_judged(why):
        return None, [{"artifact": f"saved_model [{signature}]", "max_abs": None, "max_rel": None, "passed": None,
                       "unjudged": True, "note": f"not judged by the original: {why}"}]

    source = manifest.source.checkpoint
    if not unchanged:
        return not_judged("its files are gone or changed since the conversion checked them")
    called = {f"{n.function}/{n.node}" for n in manifest.nodes or []}
    if called & set(manifest.params_reordered or {}):  # built in another platform's gate layout
        return not_judged("its cuDNN nodes' params are built in a gate layout other than cuDNN's (a ROCm or non-CUDA "
                          "trace), so cuDNN's reference cannot stand in for them")
    try:
        if called:
            pb = manifest.source.files.get("saved_model.pb")
            return original_with_reference(source, signature, feeds, pb), []
        return original_outputs(source, signature, feeds), []
    except Exception as e:  # noqa: BLE001 (an original that does not run here: said, not judged)
        row = could_not_run(f"saved_model [{signature}]", "the original", e)
        return None, [dict(row, passed=None, unjudged=True, note=f"not judged by the original: {row['note']}")]


def computes_in_float16(source: str) -> str:
    """Why the original SavedModel folder ``source`` computes in float16 ("its graph has 3 float16 ops"), read from
    its own ``saved_model.pb`` (main graphs and functions), or "" where it does not. The float16 tolerance of an
    artifact is granted only where the source computes in float16: never because an artifact does."""
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(source, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    half = types_pb2.DT_HALF

    def computes(node):
        return any(value.type == half or half in value.list.type for value in node.attr.values())

    count = sum(computes(node) for meta in proto.meta_graphs for node in
                [*meta.graph_def.node, *(n for f in meta.graph_def.library.function for n in f.node_def)])
    return f"its graph has {count} float16 op{'s' if count != 1 else ''}" if count else ""

