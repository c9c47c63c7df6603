"""The graph road: ``cudnn-port convert SAVEDMODEL OUT``, a SavedModel holding cuDNN nodes -> OUT/saved_model (each
node replaced by CPU ops, :mod:`cudnn_port.graphs.rewrite`), OUT/model.onnx (fused ONNX LSTM / GRU nodes for them,
tf2onnx for the rest) and OUT/manifest.json. The graph operations are :mod:`cudnn_port.graphs`; each format on the
graph road writes its own artifact (:func:`cudnn_port.formats.jobs.write_road`)."""
import contextlib
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, Optional, Tuple

from .. import formats as registry
from .. import tf_index
from ..errors import CudnnPortError, ParityError, reason
from ..exports.onnx import first_refusal
from ..formats.jobs import GraphJob, write_road
from ..graphs.allowlist import check_saved_model
from ..graphs.layouts import put_params_in_cudnn_order
from ..graphs.nodes import load_proto
from ..graphs.prune import drop_slot_references
from ..graphs.reach import describe, dropped_summary, reach
from ..manifest import Manifest, new_manifest
from ..manifest_records import DroppedRecord, NodeRecord
from ..outdir import OutputFolder, finish
from ..paths import refuse_links_out, require_file, sha256
from ..progress import say_to
from ..exports.runners import load_saved_model, loads_shared, onnx_session
from ..judging.graph_inputs import run_error
from ..judging.signature_feeds import signature_feeds
from ..judging.original import original_outputs
from ..judging.parity import sample_inputs
from ..deps import import_tf

if TYPE_CHECKING:
    from tensorflow.core.protobuf import saved_model_pb2


def convert_saved_model(source: str, out: str, formats: Optional[Iterable[str]] = None, force: bool = False,
                        say: Optional[Callable[[str], None]] = None, trust_source: bool = False) -> Manifest:
    """Convert SavedModel folder ``source`` into ``out``; returns the manifest. Its graph must pass the op
    allow-list (:mod:`cudnn_port.graphs.allowlist`) before any of it is loaded or run, unless ``trust_source``."""
    say = say_to(say)
    graph_formats = tuple(f.name for f in registry.on_road("graph"))
    formats = tuple(formats or graph_formats)
    other = [f for f in formats if f not in graph_formats]
    if other:
        raise CudnnPortError(f"a SavedModel converts to {', '.join(graph_formats)}, not {other[0]}; its weights "
                             f"live in the graph's variables, so pass --formats {','.join(graph_formats)} (the "
                             "default)")
    folder = OutputFolder(out, force=force, sources=[source])
    proto = load_proto(source)
    check_saved_model(source, proto, trust_source=trust_source, say=say)  # before TensorFlow loads any of it
    check_files(source, proto)
    drop_slot_references(proto)  # an OptimizerV2's slots: TF without tf_keras cannot restore them
    reached = reach(proto)  # prunes: e.g. tf_keras's gpu_lstm_with_fallback and its gradient pair
    dropped, nodes = reached["dropped"], reached["called"]
    uncalled = {name: ops for name, ops in dropped.items() if ops}
    reordered = put_params_in_cudnn_order(proto, nodes)  # Keras 3 traced on a build without CUDA, or on ROCm
    if not nodes and not uncalled:
        raise CudnnPortError(f"{source} holds no CudnnRNN/CudnnRNNV2/CudnnRNNV3 node, so it already runs on CPU; "
                             "nothing to convert")
    backward = [n for n in nodes if n.backward]
    if backward and "onnx" in formats:
        raise CudnnPortError(f"node {backward[0].name} ({backward[0].op}) is cuDNN's backward op, called by a "
                             "signature that computes gradients; ONNX has no such op, so pass --formats saved_model")
    refused = first_refusal((n.name, n.spec) for n in nodes) if "onnx" in formats else None
    if refused and formats != graph_formats:
        raise CudnnPortError(f"node {refused}; leave onnx out of --formats")
    if uncalled:
        say(f"dropped {len(dropped)} library functions nothing calls, {len(uncalled)} of them holding cuDNN ops "
            "(GPU alternatives, e.g. tf_keras's gpu_lstm_with_fallback and its gradient)")
    for node in nodes:
        say(f"{node.name} ({node.op}): {node.spec.describe()}")

    def write(tmp):
        manifest = new_manifest(source, f"SavedModel with {len(nodes)} cuDNN node{'s' * (len(nodes) > 1)}",
                                "signatures, inputs and outputs keep their names", formats, road="graph")
        manifest.nodes = [NodeRecord.of(n.to_dict()) for n in nodes]
        manifest.uncalled_functions_dropped = DroppedRecord.of(dropped_summary(dropped))
        manifest.gpu_alternatives = [NodeRecord.of(n) for n in describe(reached["gpu_alternatives"], True)]
        manifest.params_reordered = reordered
        job = GraphJob(source, proto, nodes, reordered, say, lambda what: user_graph(source, what),
                       lambda signature: original_on_cpu(source, proto, signature), manifest=manifest)
        manifest.model_artifacts = write_road("graph", job, tmp, manifest, say, formats)
        arts = manifest.model_artifacts
        if "saved_model" in arts and "onnx" in arts and manifest.onnx_input is None:
            say("running model.onnx once on the inputs verify draws")
            run_onnx_once(os.path.join(tmp, arts["saved_model"]), os.path.join(tmp, arts["onnx"]),
                          manifest.onnx_signature)
        files = [os.path.join(root, f) for root, _, fs in os.walk(source) for f in fs]
        manifest.source.files = {os.path.relpath(f, source): sha256(f) for f in sorted(files)}
        return finish(manifest, tmp)

    with loads_shared():  # the rewritten SavedModel loaded once: to prove it loads, then to feed the ONNX check
        return folder.build(write, say)


def original_on_cpu(source: str, proto: "saved_model_pb2.SavedModel", signature: str,
                    seed: int = 0) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """(feeds, outputs): seeded inputs of ``signature`` (:func:`~cudnn_port.judging.parity.sample_inputs`, by the
    shapes and dtypes its SignatureDef declares) and the original SavedModel's own outputs on them, run on CPU by
    stock TensorFlow in a ``tf.compat.v1`` session (:func:`~cudnn_port.judging.original.original_outputs`;
    Grappler keeps each standard function there). The judge of a gate layout the graph cannot tell."""
    tf = import_tf()
    declared = proto.meta_graphs[0].signature_def[signature].inputs
    specs = [(name, tf.TensorSpec([d.size if d.size >= 0 else None for d in info.tensor_shape.dim]
                                  if not info.tensor_shape.unknown_rank else None, tf.as_dtype(info.dtype)))
             for name, info in sorted(declared.items())]
    feeds = sample_inputs(specs, seed)
    outputs = original_outputs(source, signature, feeds)
    if outputs is None:
        raise CudnnPortError(f"{source} is gone, so its own outputs cannot be computed")
    return feeds, outputs


def check_files(source: str, proto: "saved_model_pb2.SavedModel") -> None:
    """Refuse a SavedModel folder TensorFlow would hang or crash on: a file that is not a regular one (a pipe), or
    variables whose checkpoint is missing or corrupt (checked like any checkpoint, :mod:`cudnn_port.tf_index`), a
    symbolic link that leaves the folder."""
    refuse_links_out(source, "SavedModel")
    for root, _, files in os.walk(source):
        for name in files:
            require_file(os.path.join(root, name), "SavedModel file")
    prefix = os.path.join(source, "variables", "variables")
    has_variables = any(node.WhichOneof("kind") == "variable" for meta in proto.meta_graphs
                        for node in meta.object_graph_def.nodes)
    if os.path.lexists(prefix + ".index"):
        tf_index.check(prefix)
    elif has_variables:
        raise CudnnPortError(f"{source}/variables/ is missing, but the graph has variables; copy the whole "
                             "SavedModel folder")


@contextlib.contextmanager
def user_graph(source: str, what: str) -> Iterator[None]:
    """Errors TensorFlow or tf2onnx raise on the user's graph are bad input: one line naming the SavedModel."""
    try:
        yield
    except CudnnPortError:
        raise
    except Exception as e:  # tf.errors.OpError (DataLossError, NotFoundError, ...), protobuf's DecodeError, ...
        if isinstance(e, (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError, OSError)) or \
                type(e).__module__.startswith(("tensorflow", "google.protobuf", "tf2onnx")):
            raise CudnnPortError(f"cannot {what} {source} ({reason(e)}); is it a complete, undamaged SavedModel "
                                 "folder?") from None
        raise


def run_onnx_once(saved_model: str, onnx_path: str, signature: str = "serving_default", seed: int = 0) -> None:
    """Run the ONNX model on the inputs verify feeds ``signature`` (token ids for table lookups, fixed dimensions
    kept); raise ParityError (exit 1, nothing published) naming the failing node if onnxruntime fails."""
    signatures = load_saved_model(saved_model).signatures
    if signature not in signatures:
        return
    feeds, _ = signature_feeds(signatures[signature], seed)
    try:
        session = onnx_session(onnx_path)
        session.run(None, {i.name: feeds[i.name] for i in session.get_inputs()})
    except Exception as e:  # noqa: BLE001 (onnxruntime's errors: the artifact's defect, reported in one line)
        raise ParityError(f"the written model.onnx fails in onnxruntime on the serving signature's inputs: "
                          f"{run_error(e)}; nothing was written") from None
