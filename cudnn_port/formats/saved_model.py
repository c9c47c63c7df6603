"""``saved_model``: OUT/saved_model/, signatures ``serving_default(inputs, sequence_lengths)`` and
``with_initial_state(inputs, sequence_lengths, initial_h[, initial_c])``, plain TensorFlow ops (or XLA with
``xla``), weights frozen in (:mod:`cudnn_port.exports.tensorflow`). Run two ways, as users run it: through its
signatures (TF Serving, ``loaded.signatures[...]``) and through the functions ``loaded.serve`` /
``loaded.serve_state`` that ``tf.saved_model.load(path)`` exposes, which hold their own copy of the graph."""
import os

from . import Artifact, Format, Runtime


def _write(canon, paths, *, name, options):
    from ..exports import tensorflow as tf_export

    tf_export.write_saved_model(canon, paths["saved_model"], options.get("xla", False))


def _outputs(spec, result):
    from ..exports import io_names

    values = [result[n].numpy() for n in io_names(spec)[1]]
    return values + [None] * (3 - len(values))


def _open_signatures(path, spec):
    from ..deps import import_tf

    tf = import_tf()
    loaded = tf.saved_model.load(os.fspath(path))

    def run(feeds):
        name = "with_initial_state" if "initial_h" in feeds else "serving_default"
        return _outputs(spec, loaded.signatures[name](**{k: tf.constant(v) for k, v in feeds.items()}))

    return run


def _open_functions(path, spec):
    from ..deps import import_tf

    tf = import_tf()
    loaded = tf.saved_model.load(os.fspath(path))

    def run(feeds):
        function = loaded.serve_state if "initial_h" in feeds else loaded.serve
        return _outputs(spec, function(**{k: tf.constant(v) for k, v in feeds.items()}))

    return run


FORMAT = Format(name="saved_model", help="OUT/saved_model/, signatures serving_default and with_initial_state",
                artifacts=(Artifact("saved_model", "saved_model{suffix}", states="optional"),),
                write=_write, runtimes=(Runtime("signatures", _open_signatures, needs=("tensorflow",)),
                                        Runtime("functions", _open_functions, needs=("tensorflow",), bench=False)),
                needs=("tensorflow",), default=True, order=30)
