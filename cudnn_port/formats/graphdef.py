"""``graphdef``: OUT/frozen_graph.pb, the SavedModel's computation as a frozen GraphDef for TF1-style sessions:
placeholders ``inputs:0``, ``sequence_lengths:0``, ``initial_h:0`` (and ``initial_c:0``; zeros by default), outputs
``outputs:0``, ``final_h:0`` (``final_c:0``) (:mod:`cudnn_port.exports.tensorflow`)."""
from . import Artifact, Format, Road, Runtime
from .. import formats as registry
from ..deps import import_tf
from ..exports import io_names, tensorflow as tf_export
from ..exports.runners import load_graph
from ..exports.tensorflow import strip_unused_placeholders
from ..graphs.frozen import has_tables, open_frozen, write_frozen
from ..graphs.nodes import onnx_signature
from .jobs import Outputs


def _write(job, paths):
    return {"graphdef_nodes": tf_export.write_frozen_graph(job.canon, paths["graphdef"])}


def _open(path, job):
    tf = import_tf()
    session = tf.compat.v1.Session(graph=load_graph(path))
    fetches = [f"{n}:0" for n in io_names(job.spec)[1]]

    def run(feeds):
        return Outputs.of_stack(session.run(fetches, {f"{k}:0": v for k, v in feeds.items()}))

    return run


def _write_model(job, paths):
    """The whole model's CPU trace frozen: inputs as the model names them, outputs ``output_0`` ..."""
    frozen = job.frozen("cpu")
    outputs = Outputs.traced_names(len(frozen.outputs))
    graph_def = strip_unused_placeholders(frozen.graph.as_graph_def(), keep=[t.name for t in frozen.inputs],
                                          outputs=dict(zip(outputs, [t.name for t in frozen.outputs])))
    with open(paths["graphdef"], "wb") as f:
        f.write(graph_def.SerializeToString())
    # recorded in output order (output_0, output_1, ..., output_10), as the runners return them
    ordered = sorted(outputs, key=Outputs.number)
    return {"graphdef_nodes": {"inputs": [t.name for t in frozen.inputs], "outputs": [f"{n}:0" for n in ordered]}}


def _open_model(path, job):
    session = import_tf().compat.v1.Session(graph=load_graph(path))
    names = job.manifest.graphdef_nodes

    def run(feeds):
        return Outputs.of_model(session.run(names["outputs"], {n: feeds[name] for n, name in
                                                               zip(names["inputs"], job.input_names)}))

    return run


def _write_graph(job, paths):
    """A raw-text SavedModel's whole signature, strings in, its lookup tables' contents written in and an
    ``init_all_tables`` op (:mod:`cudnn_port.graphs.frozen`), frozen from the rewritten OUT/saved_model."""
    if "saved_model" not in job.written:
        raise registry.NotWritten("it is frozen from saved_model/; add saved_model to --formats")
    with job.user_graph("freeze"):
        return {"graphdef_nodes": write_frozen(job.written["saved_model"], paths["graphdef"],
                                               onnx_signature(job.proto) or "serving_default")}


def _open_graph(path, job):
    """frozen_graph.pb in a TF1 session, its tables initialised by its ``init_all_tables`` first; strings in."""
    run = open_frozen(path, job.manifest.graphdef_nodes)
    return lambda feeds: Outputs(run(feeds), "strings in, init_all_tables run first")


def _has_tables(job):
    return has_tables(job.proto)


FORMAT = Format(name="graphdef", help="OUT/frozen_graph.pb, a frozen GraphDef for TF1 sessions",
                artifacts=(Artifact("graphdef", "frozen_graph{suffix}.pb", states="optional"),),
                write=_write, runtimes=(Runtime("session", _open, needs=("tensorflow",)),),
                needs=("tensorflow",), default=True, order=40,
                model=Road((Artifact("graphdef", "frozen_graph.pb"),), _write_model, _open_model, "graphdef",
                           ("tensorflow",)),
                graph=Road((Artifact("graphdef", "frozen_graph.pb"),), _write_graph, _open_graph,
                           "graphdef (TF1 session)", ("tensorflow",), applies=_has_tables))
