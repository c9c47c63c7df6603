"""Where the commands apply the op allow-list (:mod:`.allowlist`): every SavedModel and frozen graph that ``verify`` and
``bench`` would load from an OUT (one someone else wrote too), and what ``inspect`` reports about a SavedModel.

Which commands run a SavedModel's graph: ``convert`` (TensorFlow loads the source to trace the gate layout of its
cuDNN params, tf2onnx converts it, and the written OUT/saved_model is loaded once), ``verify`` and ``bench`` (they
load and run OUT/saved_model and OUT/frozen_graph.pb). ``inspect`` only parses the protobuf and runs none of it.
"""
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from .allowlist import check_constants, check_graph_def, check_saved_model, saved_model_findings
from ..deps import import_tf

if TYPE_CHECKING:
    from ..manifest import Manifest
    from tensorflow.core.protobuf import saved_model_pb2

RUNS_GRAPH = ("inspect runs none of the graph; convert loads and runs it (layout probe, tf2onnx, the written "
              "saved_model), verify and bench load and run OUT/saved_model and OUT/frozen_graph.pb")


def _named(manifest) -> Iterator[Tuple[str, str]]:
    """(artifact key, path relative to OUT) of every artifact the manifest names: the whole model's and each stack's."""
    for key, rel in (manifest.get("model_artifacts") or {}).items():
        yield key, rel
    for stack in manifest.get("stacks") or []:
        for key, rel in ((stack.get("artifacts") if hasattr(stack, "get") else None) or {}).items():
            yield key, rel


def graph_paths(out: str, manifest: "Manifest") -> List[Tuple[str, str]]:
    """("saved_model" or "graphdef", path) of everything in OUT a TensorFlow loader would read: the SavedModels and
    frozen graphs the manifest names, any other folder holding a saved_model.pb, and the source SavedModel that
    verify's judge runs."""
    found = {}
    for key, rel in _named(manifest):
        if not isinstance(rel, str):
            continue
        path = os.path.join(out, rel)
        if os.path.isfile(os.path.join(path, "saved_model.pb")):
            found[path] = "saved_model"
        elif os.path.isfile(path) and (key.startswith("graphdef") or rel.endswith(".pb")):
            found[path] = "graphdef"
    for root, _, files in os.walk(out):
        if "saved_model.pb" in files:
            found.setdefault(root, "saved_model")
    record = manifest.get("source")
    source = record.get("checkpoint") if hasattr(record, "get") else None
    if isinstance(source, str) and os.path.isfile(os.path.join(source, "saved_model.pb")):
        found.setdefault(source, "saved_model")  # verify's judge runs the original SavedModel (judging.original)
    return sorted((kind, path) for path, kind in found.items())


def check_out(out: str, manifest: "Manifest", *, trust_source: bool = False,
              say: Optional[Callable[[str], None]] = None) -> None:
    """Apply the allow-list to every graph of OUT before verify or bench loads any (a file that does not parse is
    left to the runtime, which reports it in its row)."""
    paths = graph_paths(os.fspath(out), manifest)
    if not paths:
        return

    import_tf()
    # lazy: TensorFlow, loaded on first use (import cudnn_port stays light)
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    for kind, path in paths:
        message = saved_model_pb2.SavedModel() if kind == "saved_model" else graph_pb2.GraphDef()
        try:
            with open(os.path.join(path, "saved_model.pb") if kind == "saved_model" else path, "rb") as f:
                message.ParseFromString(f.read())
        except Exception:  # noqa: BLE001 (DecodeError, OSError: TensorFlow's loader fails on it in its row)
            continue
        if kind == "saved_model":
            check_saved_model(path, message, trust_source=trust_source, say=say)
        else:
            check_graph_def(path, message, trust_source=trust_source, say=say)


def inspect_entries(path: str, proto: "saved_model_pb2.SavedModel") -> Dict[str, Any]:
    """inspect's words on a SavedModel's graph: what it would run beyond pure computation, and which commands run it
    (a constant declaring far more than it stores is refused here too)."""
    for meta in proto.meta_graphs:
        check_constants(meta.graph_def, path)
    return {"beyond_compute": [f._asdict() for f in saved_model_findings(proto)], "runs_graph": RUNS_GRAPH}
