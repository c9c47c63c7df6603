"""``tflite``: OUT/model.tflite (inputs, sequence_lengths) and OUT/model_stateful.tflite (and initial_h[,
initial_c], for streaming), builtin ops only: LSTM stacks as fused ``UNIDIRECTIONAL_SEQUENCE_LSTM`` ops (projection
included), GRU stacks as a ``WHILE`` loop of builtin ops (:mod:`cudnn_port.exports.tflite`). Both return outputs,
final_h (and final_c) with cuDNN's semantics on ragged batches. Run by LiteRT's interpreter (``ai_edge_litert``) and,
as a second judge, TensorFlow's own ``tf.lite.Interpreter``."""
from typing import Any, Callable, Dict

import numpy as np

from . import Artifact, Format, NotWritten, Road, Runtime
from ..exports import OUTPUT_NAMES, tflite as tflite_export, tflite_model
from ..exports.runners import litert_interpreter
from ..layout import unpack
from .jobs import Outputs


def _write(job, paths):
    batch = job.options.get("batch")  # the batch a whole model declares: where LiteRT starts (exports.tflite)
    tflite_export.write_tflite(job.canon, paths["tflite"], batch=batch)
    tflite_export.write_tflite(job.canon, paths["tflite_stateful"], stateful=True, batch=batch)


def interpreter_runner(interpreter: Any) -> Callable[[Dict[str, np.ndarray]], Outputs]:
    """``run(feeds) -> Outputs`` (outputs, final_h, final_c where it has one) over a TFLite ``interpreter`` of an
    exported stack; it resizes the inputs (and reallocates) only when the feeds' shapes change."""
    inputs = {d["name"]: d["index"] for d in interpreter.get_input_details()}
    outputs = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    shapes: Dict[str, Any] = {}  # {input name: the shape its tensor was resized to}

    def run(feeds):
        if set(feeds) != set(inputs):
            raise ValueError(f"the model takes {sorted(inputs)}, got {sorted(feeds)}")
        wanted = {k: np.shape(v) for k, v in feeds.items()}
        if wanted != shapes:
            for key, shape in wanted.items():
                interpreter.resize_tensor_input(inputs[key], shape)
            interpreter.allocate_tensors()
            shapes.clear()
            shapes.update(wanted)
        for key, value in feeds.items():
            interpreter.set_tensor(inputs[key], np.asarray(value, np.int32 if key == "sequence_lengths" else
                                                           np.float32))
        interpreter.invoke()
        return Outputs.of_stack([interpreter.get_tensor(outputs[n]) if n in outputs else None
                                 for n in OUTPUT_NAMES])

    return run


def _open_litert(path, job):
    return interpreter_runner(litert_interpreter(path))


def _open_tf(path, job):
    return interpreter_runner(litert_interpreter(path, tf_lite=True))


def _write_model(job, paths):
    """TFLite's converter over the whole model, each fused layer spliced in as builtin ops."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    from ..layers import fused_layers

    layers = fused_layers(job.model)
    refused = next((f"fused layer {layer.name}: {why}" for layer in layers
                    for why in [tflite_export.cannot_hold(layer.spec)] if why), None)
    if refused:
        raise NotWritten(f"{refused}; the other artifacts hold it")
    kernels = {layer.opaque_kernel.numpy().astype("float32").tobytes(): unpack(layer.spec, layer.opaque_kernel.numpy())
               for layer in layers}
    try:
        data = tflite_model.convert(job.frozen("cudnn"), job.input_names,
                                    sorted(job.traced("cudnn").structured_outputs), kernels,
                                    batch=job.batch)
    except Exception as e:  # noqa: BLE001 (TF's converter or the splice refuses some op: the other artifacts stand)
        raise NotWritten(f"{tflite_model.why(e)}; only the per-layer .tflite files (layers/<layer>/) were written")
    with open(paths["tflite"], "wb") as f:
        f.write(data)


def _open_model(path, job):
    """LiteRT's interpreter through the model's SignatureDef, which resizes the inputs itself."""
    runner = litert_interpreter(path).get_signature_runner("serving_default")

    def run(feeds):
        result = runner(**{name: feeds[name] for name in job.input_names})
        return Outputs.of_model([result[f"output_{i}"] for i in range(job.count)])

    return run


FORMAT = Format(name="tflite", help="OUT/model.tflite and OUT/model_stateful.tflite, builtin TFLite ops only (fused "
                "sequence-LSTM ops), for LiteRT",
                artifacts=(Artifact("tflite", "model{suffix}.tflite", states="none"),
                           Artifact("tflite_stateful", "model_stateful{suffix}.tflite", states="required")),
                write=_write, runtimes=(Runtime("litert", _open_litert, needs=("ai_edge_litert",)),
                                        Runtime("tf.lite", _open_tf, needs=("tensorflow",), bench=False)),
                needs=("flatbuffers",), order=70, cannot_hold=tflite_export.cannot_hold,
                model=Road((Artifact("tflite", "model.tflite"),), _write_model, _open_model, "tflite (litert)",
                           ("ai_edge_litert",)))
