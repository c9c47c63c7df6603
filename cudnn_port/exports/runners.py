"""Loaders shared by the format runtimes (:mod:`cudnn_port.formats`) and the whole-model judges: a frozen GraphDef
into a ``tf.Graph``, an ONNX model into a quiet onnxruntime CPU session."""
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnxruntime as ort
    import tensorflow as tf


def load_graph(path) -> "tf.Graph":
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


def onnx_session(path) -> "ort.InferenceSession":
    """An onnxruntime CPU session of the model at ``path`` (or of a serialized model). Its log level is "fatal":
    what onnxruntime logs (warnings at load, a failing node's error) is not ours to print; a failure still raises,
    and the caller reports it in one line."""
    from ..artifact_check import check_artifact
    from ..deps import optional

    if isinstance(path, (str, os.PathLike)):
        check_artifact(path)
    ort = optional("onnxruntime", "running ONNX models")
    options = ort.SessionOptions()
    options.log_severity_level = 4
    return ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])

