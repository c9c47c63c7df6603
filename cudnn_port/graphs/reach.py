"""Which cuDNN nodes a SavedModel's signatures reach: one answer for ``inspect``, the SavedModel rewrite and the ONNX
writer.

A signature reaches a cuDNN node in one of two ways, following TF 2.0-2.21's call structure (nested
``PartitionedCall`` / ``StatefulPartitionedCall``, ``If`` / ``While`` / ``Case`` bodies, direct calls):

- **called**: a function the signature calls holds it (Keras 3 on a GPU host, a TF1 graph): the SavedModel rewrite
  replaces it by CPU ops (:mod:`.rewrite`), and the ONNX writer fuses it;
- **GPU alternative**: the signature calls a standard function (``standard_lstm``) that a GPU function shares an
  ``api_implements`` with (tf.keras 2.0-2.2's ``cudnn_lstm_with_fallback``, tf_keras's ``gpu_lstm_with_fallback``,
  preferred device GPU); Grappler's implementation selector swaps it in on a GPU. The SavedModel keeps calling the
  standard function (what it already does on a CPU) and the GPU functions are dropped (:func:`.prune.prune`); the
  ONNX writer does what the selector does (:func:`select`) and fuses the cuDNN node.

Sizes come from the node's input shapes, or, where the graph records none (tf.keras 2.0-2.2), from its callers
(:mod:`.callshapes`).
"""
import contextlib
import os
import tempfile
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Set

from .nodes import CudnnNode, find_nodes, load_proto
from .prune import called_functions, drop_slot_references, prune, select_gpu_implementations
from .callshapes import record_input_shapes
from .layouts import put_params_in_cudnn_order

if TYPE_CHECKING:
    from tensorflow.core.protobuf import saved_model_pb2


def select(proto: "saved_model_pb2.SavedModel") -> bool:
    """Make (in place) ``proto`` call the GPU alternatives, drop what nothing calls, and record the shapes calls pass
    where the graph has none: the graph the ONNX writer converts. Returns whether a call or a shape changed."""
    swapped = select_gpu_implementations(proto)
    prune(proto)
    return bool(record_input_shapes(proto)) or bool(swapped)


def reach(proto: "saved_model_pb2.SavedModel") -> Dict[str, Any]:
    """{"called": [CudnnNode], "gpu_alternatives": [CudnnNode], "dropped": {function: cuDNN ops}} of ``proto``,
    which is pruned in place (what the SavedModel rewrite then works on)."""
    selected = type(proto)()
    selected.CopyFrom(proto)
    dropped = prune(proto)
    called = find_nodes(proto)
    places = {(n.function, n.name) for n in called}
    select(selected)
    signatures = set().union(*reached_by(selected).values())
    alternatives = [n for n in find_nodes(selected, signatures) if (n.function, n.name) not in places and
                    not n.backward and n.function in signatures]
    return {"called": called, "gpu_alternatives": alternatives, "dropped": dropped}


def reached_by(proto: "saved_model_pb2.SavedModel") -> Dict[str, Set[str]]:
    """{signature: the library functions it calls, directly or not}."""
    found: Dict[str, Set[str]] = {}
    for meta in proto.meta_graphs:
        functions = {f.signature.name: f for f in meta.graph_def.library.function}
        nodes = {n.name: n for n in meta.graph_def.node}
        for name, signature in meta.signature_def.items():
            roots = [nodes[out.name.split(":")[0]] for out in signature.outputs.values()
                     if out.name.split(":")[0] in nodes and not name.startswith("__")]
            todo = [c for node in roots for c in called_functions(node) if c in functions]
            seen = found.setdefault(name, set())
            while todo:
                current = todo.pop()
                if current not in seen:
                    seen.add(current)
                    todo += [c for n in functions[current].node_def for c in called_functions(n) if c in functions]
    return found


def describe(nodes: List[CudnnNode], alternatives: bool = False) -> List[Dict[str, Any]]:
    """The manifest's and inspect's entry of each node."""
    return [dict(n.to_dict(), converts_as=f"{n.spec.describe()}: the standard function it stands in for runs in the "
                 f"SavedModel, fused ONNX {n.spec.mode.upper()} nodes in ONNX" if alternatives else n.converts_as())
            for n in nodes]


@contextlib.contextmanager
def gpu_selected(source: str, reordered: Optional[Dict[str, str]] = None,
                 chosen: Optional[Dict[str, Any]] = None) -> Iterator[str]:
    """``source``, or, where it has GPU alternatives (:func:`select_gpu_implementations`), a temporary SavedModel
    that calls them instead, uncalled functions pruned, the shapes calls pass recorded where the graph has none
    (tf.keras 2.0-2.2, :mod:`.callshapes`), each cuDNN node's params in cuDNN's gate layout
    (:mod:`.layouts`) and optimizer slot references dropped (:func:`drop_slot_references`; its other files linked,
    not copied). ``reordered``, a dict, receives what :mod:`.layouts` changed; ``chosen``: {"function/node": perm or
    None} of the layouts the marker run cannot tell, chosen by the original's outputs (:mod:`.layout_choice`)."""
    proto = load_proto(source)
    swapped = select(proto)
    changed = put_params_in_cudnn_order(proto, find_nodes(proto, set().union(*reached_by(proto).values())), chosen)
    if reordered is not None:
        reordered.update(changed)
    if not (drop_slot_references(proto) or swapped or changed):
        yield source
        return
    with tempfile.TemporaryDirectory(prefix="cudnn_port_gpu_selected_") as tmp:
        for name in os.listdir(source):
            if name not in ("saved_model.pb", "fingerprint.pb"):
                os.symlink(os.path.abspath(os.path.join(source, name)), os.path.join(tmp, name))
        with open(os.path.join(tmp, "saved_model.pb"), "wb") as f:
            f.write(proto.SerializeToString())
        yield tmp


def dropped_summary(dropped: Dict[str, List[str]]) -> Dict[str, Any]:
    """What pruning dropped: how many functions, and those that held cuDNN ops."""
    return {"count": len(dropped), "with_cudnn_ops": {name: ops for name, ops in sorted(dropped.items()) if ops}}
