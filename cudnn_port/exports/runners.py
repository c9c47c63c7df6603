"""Load an exported artifact once and return a callable ``run(feeds) -> [outputs, final_h, final_c or None]``.

``feeds`` maps the interface's input names (see :mod:`cudnn_port.exports`) to NumPy arrays. Used by ``verify``
and ``bench``, so both run each artifact exactly the way its users load it.
"""
import os

from . import io_names


def _padded(values):
    values = list(values)
    return values + [None] * (3 - len(values))


def saved_model(path, spec):
    import tensorflow as tf

    fn = tf.saved_model.load(os.fspath(path)).signatures["with_initial_state"]
    _, names_out = io_names(spec)

    def run(feeds):
        result = fn(**{k: tf.constant(v) for k, v in feeds.items()})
        return _padded(result[n].numpy() for n in names_out)

    return run


def load_graph(path):
    """A tf.Graph holding the frozen GraphDef at ``path`` (node names kept)."""
    import tensorflow as tf

    graph_def = tf.compat.v1.GraphDef()
    with open(path, "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    return graph


def graphdef(path, spec):
    import tensorflow as tf

    session = tf.compat.v1.Session(graph=load_graph(path))
    fetches = [f"{n}:0" for n in io_names(spec)[1]]
    return lambda feeds: _padded(session.run(fetches, {f"{k}:0": v for k, v in feeds.items()}))


def onnx(path, spec):
    import onnxruntime as ort

    session = ort.InferenceSession(os.fspath(path), providers=["CPUExecutionProvider"])
    names_out = list(io_names(spec)[1])
    return lambda feeds: _padded(session.run(names_out, feeds))


RUNNERS = {"saved_model": saved_model, "graphdef": graphdef, "onnx": onnx}
