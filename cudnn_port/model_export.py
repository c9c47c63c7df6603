"""Export a Keras model built with :mod:`cudnn_port.layers` for CPU use: the library call after training.

    cudnn_port.export(model, "out/")          # or: cudnn-port convert model.keras out/

writes, for the whole model (embeddings, dense heads and every fused layer), built in a temporary sibling and
renamed into place:

- ``OUT/saved_model/``: signature ``serving_default`` over the model's inputs, traced with every fused layer on
  its CPU path (standard ops): no Cudnn op, loads and runs on a CPU-only TensorFlow;
- ``OUT/frozen_graph.pb``: the same, variables frozen into constants, for TF1-style sessions (input and output
  tensor names in the manifest);
- ``OUT/model.onnx``: tf2onnx for the rest of the model, each fused layer as fused ONNX LSTM / GRU nodes (the
  model is traced with the cuDNN op, whose frozen params the ONNX handler unpacks; nothing runs it);
- ``OUT/checkpoint/``: the model's variables, each fused layer's buffer as per-layer Keras LSTM / GRU tensors
  (``--style``-like ``style``), everything else copied;
- ``OUT/layers/<layer>/``: each fused layer alone as ``convert`` writes a stack (``saved_model/`` with the
  ``with_initial_state`` signature, ``frozen_graph.pb``, ``model.onnx``): step functions for decoding;
- ``OUT/model_parity.json``: the whole model's outputs from each artifact against the Keras model itself, on
  seeded inputs;
- ``OUT/manifest.json``.
"""
import os

import numpy as np

from ._tf import import_tf as _tf
from .errors import CudnnPortError

ATOL, RTOL = 1e-5, 1e-4
LAYER_FORMATS = ("checkpoint", "saved_model", "graphdef", "onnx")  # each fused layer alone, e.g. as a step function


def _input_specs(model):
    tf = _tf()
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise CudnnPortError(f"model {model.name} has no known inputs; build it (call it once, or use "
                             "keras.Input) before exporting")
    return [tf.TensorSpec(t.shape, t.dtype, name=t.name.split(":")[0]) for t in inputs]


def _traced(model, specs, path):
    """The model as a concrete function over ``specs``, its fused layers traced on ``path``."""
    from .layers import forced_path

    tf = _tf()

    def call(*xs):
        result = model(xs[0] if len(xs) == 1 else list(xs), training=False)
        results = result if isinstance(result, (list, tuple)) else [result]
        return {f"output_{i}": r for i, r in enumerate(results)}

    with forced_path(path):
        return tf.function(call, input_signature=specs, autograph=False).get_concrete_function()


def export(model, out, *, style="keras", force=False, progress=None, seed=0, path=None, xla=True):
    """Write the CPU artifacts of ``model`` (a built Keras model holding cudnn_port fused layers) to ``out``;
    returns the manifest. See the module docstring for what is written. ``path``: the ``.keras`` file the model
    came from, if any (recorded and hashed in the manifest). ``xla=False``: each layer's SavedModel in plain
    ops (see :mod:`cudnn_port.exports.tensorflow`)."""
    from .converter import _build, _finish, _prepare_out, _write, prepare_stacks
    from .readers.keras_model import KerasModelSource

    say = progress or (lambda message: None)
    specs = _input_specs(model)
    out = _prepare_out(out, force)
    source = KerasModelSource(model, os.path.abspath(path) if path else None)
    stacks = prepare_stacks(source, say=say)

    def write(tmp):
        manifest = _write(source, stacks, tmp, style, LAYER_FORMATS, False, say, layer_dir="layers", xla=xla)
        manifest["kind"] = "keras_model"
        manifest["model_artifacts"] = _write_model(model, specs, tmp, say, manifest)
        manifest["parity"] = _parity(model, specs, tmp, manifest, seed, say)
        return _finish(manifest, tmp)

    manifest = _build(out, write, say)
    if not manifest["parity"]["passed"]:
        say("warning: an artifact disagrees with the Keras model; see model_parity.json")
    return manifest


def _write_model(model, specs, tmp, say, manifest):
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    from .exports.onnx import write_graph_onnx
    from .exports.tensorflow import op_types

    tf = _tf()
    say("writing saved_model/ (fused layers on their CPU path)")
    cpu = _traced(model, specs, "cpu")
    module = tf.Module()
    module.variables_ = list(model.variables)
    module.serve = cpu
    tf.saved_model.save(module, os.path.join(tmp, "saved_model"), signatures={"serving_default": cpu})
    ops = op_types(cpu.graph.as_graph_def())
    if any(op.startswith("Cudnn") for op in ops):
        raise CudnnPortError("the CPU trace still holds a Cudnn op; a layer other than cudnn_port's calls cuDNN")

    say("writing frozen_graph.pb")
    frozen = convert_variables_to_constants_v2(cpu)
    graph_def = frozen.graph.as_graph_def()
    with open(os.path.join(tmp, "frozen_graph.pb"), "wb") as f:
        f.write(graph_def.SerializeToString())
    manifest["graphdef_nodes"] = {"inputs": [t.name for t in frozen.inputs],
                                  "outputs": [t.name for t in frozen.outputs]}

    say("writing model.onnx (fused ONNX LSTM/GRU nodes for the fused layers)")
    fused = convert_variables_to_constants_v2(_traced(model, specs, "cudnn"))
    names_in, names_out = [t.name for t in fused.inputs], [t.name for t in fused.outputs]
    renames = dict(zip(names_in, [s.name for s in specs]))
    renames.update(zip(names_out, [f"output_{i}" for i in range(len(names_out))]))
    write_graph_onnx(fused.graph.as_graph_def(), names_in, names_out, os.path.join(tmp, "model.onnx"), renames)
    return {"saved_model": "saved_model", "graphdef": "frozen_graph.pb", "onnx": "model.onnx"}


def _parity(model, specs, tmp, manifest, seed, say):
    """Each artifact's outputs against the Keras model's own (CPU path), on seeded inputs; writes
    model_parity.json (``cudnn-port verify OUT`` writes its own parity.json)."""
    import json

    import onnxruntime as ort

    from .exports.runners import load_graph
    from .layers import forced_path
    from .verify import _compare, failed_row, sample_inputs

    tf = _tf()
    feeds = sample_inputs([(s.name, s) for s in specs], seed, pad_last=True)
    with forced_path("cpu"):
        want = model([feeds[s.name] for s in specs] if len(specs) > 1 else feeds[specs[0].name], training=False)
    want = [np.asarray(w) for w in (want if isinstance(want, (list, tuple)) else [want])]
    rows = []

    def check(name, run):
        say(f"parity: {name}")
        try:
            rows.append(_compare(name, run(), want, ATOL, RTOL))
        except Exception as e:  # an artifact that fails to run is a failed check
            rows.append(failed_row(name, e))

    def saved_model():
        fn = tf.saved_model.load(os.path.join(tmp, "saved_model")).signatures["serving_default"]
        result = fn(**{s.name: feeds[s.name] for s in specs})
        return [result[f"output_{i}"].numpy() for i in range(len(want))]

    def graphdef():
        names = manifest["graphdef_nodes"]
        with tf.compat.v1.Session(graph=load_graph(os.path.join(tmp, "frozen_graph.pb"))) as session:
            return session.run(names["outputs"], {n: feeds[s.name] for n, s in zip(names["inputs"], specs)})

    def onnx_model():
        session = ort.InferenceSession(os.path.join(tmp, "model.onnx"), providers=["CPUExecutionProvider"])
        return session.run([f"output_{i}" for i in range(len(want))], {s.name: feeds[s.name] for s in specs})

    check("saved_model", saved_model)
    check("graphdef", graphdef)
    check("onnx (onnxruntime)", onnx_model)
    report = {"judge": "the Keras model itself (fused layers on their CPU path)", "atol": ATOL, "rtol": RTOL,
              "seed": seed, "rows": rows, "passed": all(r["passed"] for r in rows)}
    with open(os.path.join(tmp, "model_parity.json"), "w") as f:
        json.dump(report, f, indent=2)
    return {"passed": report["passed"], "rows": [(r["artifact"], r["max_abs"], r["passed"]) for r in rows]}


def export_keras_file(path, out, style="keras", force=False, progress=None, xla=True):
    """``cudnn-port convert model.keras OUT``: load the saved model (with cudnn_port's layers known) and export."""
    from .readers.keras_model import load_keras_file

    return export(load_keras_file(path), out, style=style, force=force, progress=progress, path=path, xla=xla)
