"""Loaders shared by the format runtimes (:mod:`cudnn_port.formats`), the judges and bench, each written once: a
frozen GraphDef into a ``tf.Graph``, an ONNX model into a quiet onnxruntime CPU session, a SavedModel, a TFLite
interpreter."""
import contextlib
import contextvars
import os
from typing import TYPE_CHECKING, Any, Dict, Iterator, Optional
import warnings
from ..deps import import_tf, optional
from .artifact_check import check_artifact

if TYPE_CHECKING:
    import onnxruntime as ort
    import tensorflow as tf


def load_graph(path: str) -> "tf.Graph":
    """A tf.Graph holding the frozen GraphDef at ``path`` (node names kept)."""
    tf = import_tf()
    graph_def = tf.compat.v1.GraphDef()
    with open(path, "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    return graph


def onnx_session(path: str) -> "ort.InferenceSession":
    """An onnxruntime CPU session of the model at ``path`` (or of a serialized model). Its log level is "fatal":
    what onnxruntime logs (warnings at load, a failing node's error) is not ours to print; a failure still raises,
    and the caller reports it in one line."""
    if isinstance(path, (str, os.PathLike)):
        check_artifact(path)
    ort = optional("onnxruntime", "running ONNX models")
    options = ort.SessionOptions()
    options.log_severity_level = 4
    return ort.InferenceSession(os.fspath(path), options, providers=["CPUExecutionProvider"])


_LOADED: "contextvars.ContextVar[Optional[Dict[str, Any]]]" = contextvars.ContextVar("loaded", default=None)


@contextlib.contextmanager
def loads_shared() -> Iterator[None]:
    """Inside, each SavedModel folder is loaded once (a verify runs its signatures and its functions from the same
    load: loading is most of a SavedModel row's time); the loads are dropped on leaving."""
    token = _LOADED.set({})
    try:
        yield
    finally:
        _LOADED.reset(token)


def load_saved_model(path: str) -> "Any":
    """``tf.saved_model.load`` of the SavedModel folder at ``path`` (once per folder inside :func:`loads_shared`)."""
    shared, key = _LOADED.get(), os.path.realpath(os.fspath(path))
    if shared is not None and key in shared:
        return shared[key]
    loaded = import_tf().saved_model.load(os.fspath(path))
    if shared is not None:
        shared[key] = loaded
    return loaded


def litert_interpreter(path: str, tf_lite: bool = False) -> "Any":
    """A TFLite interpreter of the model at ``path``: LiteRT's (``ai_edge_litert``), or with ``tf_lite`` TensorFlow's
    own ``tf.lite.Interpreter`` (TF >= 2.20 warns that it moves to ai_edge_litert; that warning is not the user's).
    The file's flatbuffer is checked first (:mod:`.artifact_check`): damaged is an error, not a crash."""
    check_artifact(path)
    if not tf_lite:  # lazy: LiteRT, an optional dependency loaded on first use
        from ai_edge_litert.interpreter import Interpreter

        return Interpreter(model_path=os.fspath(path))

    tf = import_tf()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tf.lite.Interpreter(model_path=os.fspath(path))
