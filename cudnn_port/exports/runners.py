"""Load an exported artifact once and return a callable ``run(feeds) -> [outputs, final_h, final_c or None]``.

``feeds`` maps the interface's input names (see :mod:`cudnn_port.exports`) to NumPy arrays. Used by ``verify``
and ``bench``, so both run each artifact exactly the way its users load it.
"""
import os

from . import io_names


def _padded(values):
    values = list(values)
    return values + [None] * (3 - len(values))


def saved_model(path, spec, signature=None):
    """``signature`` (default: with_initial_state when the feeds hold states, else serving_default)."""
    from ..deps import import_tf

    tf = import_tf()
    loaded = tf.saved_model.load(os.fspath(path))
    _, names_out = io_names(spec)

    def run(feeds):
        name = signature or ("with_initial_state" if "initial_h" in feeds else "serving_default")
        result = loaded.signatures[name](**{k: tf.constant(v) for k, v in feeds.items()})
        return _padded(result[n].numpy() for n in names_out)

    return run


def load_graph(path):
    """A tf.Graph holding the frozen GraphDef at ``path`` (node names kept)."""
    from ..deps import import_tf

    tf = import_tf()
    graph_def = tf.compat.v1.GraphDef()
    with open(path, "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    return graph


def graphdef(path, spec):
    from ..deps import import_tf

    tf = import_tf()
    session = tf.compat.v1.Session(graph=load_graph(path))
    fetches = [f"{n}:0" for n in io_names(spec)[1]]
    return lambda feeds: _padded(session.run(fetches, {f"{k}:0": v for k, v in feeds.items()}))


def onnx_session(path):
    """An onnxruntime CPU session of the model at ``path`` (or of a serialized model). Its log level is "error":
    onnxruntime warns about the zero-state defaults of our ONNX models (initializers listed among the inputs), which
    is what they are for."""
    from ..deps import optional

    ort = optional("onnxruntime", "running ONNX models")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])


def onnx(path, spec):
    session = onnx_session(path)
    names_out = list(io_names(spec)[1])
    return lambda feeds: _padded(session.run(names_out, feeds))


RUNNERS = {"saved_model": saved_model, "graphdef": graphdef, "onnx": onnx}
