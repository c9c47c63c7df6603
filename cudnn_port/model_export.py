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


def sample_inputs(specs, seed=0, batch=3, steps=7):
    """Seeded inputs for ``specs``: floats N(0, 1), integers in [1, 4) (token ids); unknown dims ``batch`` first,
    ``steps`` after. The last row is right-padded with zeros from step 2 on, to exercise masks."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in specs:
        shape = [d if d is not None else (batch if i == 0 else steps) for i, d in enumerate(spec.shape.as_list())]
        if spec.dtype.is_floating:
            value = rng.normal(size=shape).astype(spec.dtype.as_numpy_dtype)
        else:
            value = rng.integers(1, 4, size=shape).astype(spec.dtype.as_numpy_dtype)
        if len(shape) >= 2 and shape[0] > 1:
            value[-1, 2:] = 0
        feeds[spec.name] = value
    return feeds


def export(model, out, *, style="keras", force=False, progress=None, seed=0, path=None):
    """Write the CPU artifacts of ``model`` (a built Keras model holding cudnn_port fused layers) to ``out``;
    returns the manifest. See the module docstring for what is written. ``path``: the ``.keras`` file the model
    came from, if any (recorded and hashed in the manifest)."""
    from .converter import _build, _finish, _prepare_out, _write, prepare_stacks
    from .readers.keras_model import KerasModelSource

    say = progress or (lambda message: None)
    specs = _input_specs(model)
    out = _prepare_out(out, force)
    source = KerasModelSource(model, os.path.abspath(path) if path else None)
    stacks = prepare_stacks(source, say=say)

    def write(tmp):
        manifest = _write(source, stacks, tmp, style, LAYER_FORMATS, False, say, layer_dir="layers")
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

    from .exports.onnx import CUDNN_HANDLERS, IR_VERSION, OPSET, quiet_converters

    tf = _tf()
    say("writing saved_model/ (fused layers on their CPU path)")
    cpu = _traced(model, specs, "cpu")
    module = tf.Module()
    module.variables_ = list(model.variables)
    module.serve = cpu
    tf.saved_model.save(module, os.path.join(tmp, "saved_model"), signatures={"serving_default": cpu})
    ops = _op_types(cpu.graph.as_graph_def())
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
    import onnx
    from tf2onnx import convert

    quiet_converters()
    fused = convert_variables_to_constants_v2(_traced(model, specs, "cudnn"))
    names_in, names_out = [t.name for t in fused.inputs], [t.name for t in fused.outputs]
    renames = dict(zip(names_in, [s.name for s in specs]))
    renames.update(zip(names_out, [f"output_{i}" for i in range(len(names_out))]))
    onnx_model, _ = convert.from_graph_def(fused.graph.as_graph_def(), input_names=names_in,
                                           output_names=names_out, opset=OPSET,
                                           custom_op_handlers=dict(CUDNN_HANDLERS), tensors_to_rename=renames)
    onnx_model.ir_version = IR_VERSION
    onnx.checker.check_model(onnx_model)
    onnx.save(onnx_model, os.path.join(tmp, "model.onnx"))
    return {"saved_model": "saved_model", "graphdef": "frozen_graph.pb", "onnx": "model.onnx"}


def _op_types(graph_def):
    ops = {n.op for n in graph_def.node}
    for f in graph_def.library.function:
        ops |= {n.op for n in f.node_def}
    return ops


def _parity(model, specs, tmp, manifest, seed, say):
    """Each artifact's outputs against the Keras model's own (CPU path), on seeded inputs; writes
    model_parity.json (``cudnn-port verify OUT`` writes its own parity.json)."""
    import json

    import onnxruntime as ort

    from .layers import forced_path
    from .verify import _compare

    tf = _tf()
    feeds = sample_inputs(specs, seed)
    with forced_path("cpu"):
        want = model([feeds[s.name] for s in specs] if len(specs) > 1 else feeds[specs[0].name], training=False)
    want = [np.asarray(w) for w in (want if isinstance(want, (list, tuple)) else [want])]
    rows = []

    def check(name, run):
        say(f"parity: {name}")
        try:
            rows.append(_compare(name, run(), want, ATOL, RTOL))
        except Exception as e:  # an artifact that fails to run is a failed check
            rows.append({"artifact": name, "max_abs": None, "max_rel": None, "passed": False,
                         "note": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})

    def saved_model():
        fn = tf.saved_model.load(os.path.join(tmp, "saved_model")).signatures["serving_default"]
        result = fn(**{s.name: feeds[s.name] for s in specs})
        return [result[f"output_{i}"].numpy() for i in range(len(want))]

    def graphdef():
        graph_def = tf.compat.v1.GraphDef()
        with open(os.path.join(tmp, "frozen_graph.pb"), "rb") as f:
            graph_def.ParseFromString(f.read())
        with tf.Graph().as_default() as graph:
            tf.compat.v1.import_graph_def(graph_def, name="")
        names = manifest["graphdef_nodes"]
        with tf.compat.v1.Session(graph=graph) as session:
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


def export_keras_file(path, out, force=False, progress=None):
    """``cudnn-port convert model.keras OUT``: load the saved model (with cudnn_port's layers known) and export."""
    from .readers.keras_model import load_keras_file

    return export(load_keras_file(path), out, force=force, progress=progress, path=path)
