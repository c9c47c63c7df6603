"""``saved_model``: OUT/saved_model/, signatures ``serving_default(inputs, sequence_lengths)`` and
``with_initial_state(inputs, sequence_lengths, initial_h[, initial_c])``, plain TensorFlow ops (or XLA with
``xla``), weights frozen in (:mod:`cudnn_port.exports.tensorflow`). Run two ways, as users run it: through its
signatures (TF Serving, ``loaded.signatures[...]``) and through the functions ``loaded.serve`` /
``loaded.serve_state`` that ``tf.saved_model.load(path)`` exposes, which hold their own copy of the graph."""

from . import Artifact, Format, Road, Runtime
from ..deps import import_tf
from ..errors import CudnnPortError
from ..exports import io_names, tensorflow as tf_export
from ..exports.runners import load_saved_model
from ..exports.tensorflow import op_types
from ..graphs.rewrite import write_cpu_saved_model
from .jobs import Outputs


def _write(job, paths):
    tf_export.write_saved_model(job.canon, paths["saved_model"], job.options.get("xla", False))


def _outputs(spec, result):
    return Outputs.of_stack([result[n].numpy() for n in io_names(spec)[1]])


def _open_signatures(path, job):
    tf = import_tf()
    loaded = load_saved_model(path)

    def run(feeds):
        name = "with_initial_state" if "initial_h" in feeds else "serving_default"
        return _outputs(job.spec, loaded.signatures[name](**{k: tf.constant(v) for k, v in feeds.items()}))

    return run


def _open_functions(path, job):
    tf = import_tf()
    loaded = load_saved_model(path)

    def run(feeds):
        function = loaded.serve_state if "initial_h" in feeds else loaded.serve
        return _outputs(job.spec, function(**{k: tf.constant(v) for k, v in feeds.items()}))

    return run


FREEZE_BELOW = 1 << 30
"""A whole model whose variables hold fewer bytes is saved with its weights as constants (TensorFlow then computes
every weight's rearrangement once, when it loads the graph, where a variable's is computed in every call: 0.84x the
time at batch 1 of Emb -> LSTM(256) x2 -> Dense, whose fused LSTM op reads both matrices stacked); a larger one keeps
its variables (a graph holds less than 2 GiB)."""


def _write_model(job, paths):
    """The whole model's serving function on the fused layers' CPU path, its weights frozen in as constants (with
    the model's variables past :data:`FREEZE_BELOW` bytes)."""
    tf = import_tf()
    cpu = job.traced("cpu")
    module = tf.Module()
    if sum(v.numpy().nbytes for v in job.model.variables) < FREEZE_BELOW:
        frozen = job.frozen("cpu")
        names = Outputs.traced_names(len(frozen.outputs))  # as it returns them; its own dict of them is misnumbered

        def call(*xs):
            return dict(zip(names, tf.nest.flatten(frozen(*xs))))
        serve = tf.function(call, input_signature=job.specs, autograph=False).get_concrete_function()
    else:
        module.variables_ = list(job.model.variables)
        serve = cpu
    module.serve = serve
    tf.saved_model.save(module, paths["saved_model"], signatures={"serving_default": serve})
    if any(op.startswith("Cudnn") for op in op_types(cpu.graph.as_graph_def())):
        raise CudnnPortError("the CPU trace still holds a Cudnn op; a layer other than cudnn_port's calls cuDNN")


def _open_model(path, job):
    tf = import_tf()
    serving = load_saved_model(path).signatures["serving_default"]

    def run(feeds):
        result = serving(**{name: tf.constant(feeds[name]) for name in job.input_names})
        return Outputs.of_model([result[f"output_{i}"].numpy() for i in range(job.count)])

    return run


def _write_graph(job, paths):
    """The SavedModel with each cuDNN node replaced by CPU ops, loaded once to prove it loads."""
    with job.user_graph("rewrite"):
        write_cpu_saved_model(job.source, paths["saved_model"], job.nodes, job.proto)
        load_saved_model(paths["saved_model"])  # a damaged graph or variables fail here


def _open_graph(path, job):
    """The rewritten SavedModel's signature ``job.signature`` (loaded once per verify: it also ran every
    signature), as TF Serving runs it."""
    tf = import_tf()
    function = job.saved_model(path).signatures[job.signature]
    return lambda feeds: Outputs({k: v.numpy() for k, v in function(**{k: tf.constant(v) for k, v in
                                                                           feeds.items()}).items()})


FORMAT = Format(name="saved_model", help="OUT/saved_model/, signatures serving_default and with_initial_state",
                artifacts=(Artifact("saved_model", "saved_model{suffix}", states="optional"),),
                write=_write, runtimes=(Runtime("signatures", _open_signatures, needs=("tensorflow",)),
                                        Runtime("functions", _open_functions, needs=("tensorflow",), bench=False)),
                needs=("tensorflow",), default=True, order=30,
                model=Road((Artifact("saved_model", "saved_model"),), _write_model, _open_model, "saved_model",
                           ("tensorflow",)),
                graph=Road((Artifact("saved_model", "saved_model"),), _write_graph, _open_graph,
                           "saved_model [{signature}]", ("tensorflow",)))
