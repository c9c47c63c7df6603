"""``graphdef``: OUT/frozen_graph.pb, the SavedModel's computation as a frozen GraphDef for TF1-style sessions:
placeholders ``inputs:0``, ``sequence_lengths:0``, ``initial_h:0`` (and ``initial_c:0``; zeros by default), outputs
``outputs:0``, ``final_h:0`` (``final_c:0``) (:mod:`cudnn_port.exports.tensorflow`)."""
from . import Artifact, Format, Runtime


def _write(canon, paths, *, name, options):
    from ..exports import tensorflow as tf_export

    return {"graphdef_nodes": tf_export.write_frozen_graph(canon, paths["graphdef"])}


def _open(path, spec):
    from ..deps import import_tf
    from ..exports import io_names
    from ..exports.runners import load_graph

    tf = import_tf()
    session = tf.compat.v1.Session(graph=load_graph(path))
    fetches = [f"{n}:0" for n in io_names(spec)[1]]

    def run(feeds):
        values = session.run(fetches, {f"{k}:0": v for k, v in feeds.items()})
        return list(values) + [None] * (3 - len(values))

    return run


FORMAT = Format(name="graphdef", help="OUT/frozen_graph.pb, a frozen GraphDef for TF1 sessions",
                artifacts=(Artifact("graphdef", "frozen_graph{suffix}.pb", states="optional"),),
                write=_write, runtimes=(Runtime("session", _open, needs=("tensorflow",)),),
                needs=("tensorflow",), default=True, order=40)
