"""verify's rows for whole graphs: a converted SavedModel source, and a whole Keras model's export."""
import os

import numpy as np

from .deps import import_tf as _tf
from .parity import compare, failed_row, sample_inputs


def saved_model_rows(manifest, out, atol, rtol, seed, say):
    """A converted SavedModel: every signature runs on CPU with finite outputs, and the ONNX model agrees with the
    serving signature. (The NumPy reference judges the replacement of each kind of cuDNN node in the test suite; a
    whole foreign graph has no reference here.)"""
    tf = _tf()
    arts, rows = manifest["model_artifacts"], []
    if "saved_model" not in arts:
        return rows
    try:
        loaded = tf.saved_model.load(os.path.join(out, arts["saved_model"]))
    except Exception as e:  # noqa: BLE001 (a SavedModel that does not load is a failed check)
        return [dict(failed_row("saved_model", e), stack="(whole graph)", judge=None)]
    serving = None
    for name in sorted(loaded.signatures):
        say(f"saved_model: signature {name}")
        fn = loaded.signatures[name]
        feeds = sample_inputs(sorted(fn.structured_input_signature[1].items()), seed)
        try:
            results = {k: v.numpy() for k, v in fn(**feeds).items()}
            finite = all(np.isfinite(v).all() for v in results.values() if v.dtype.kind == "f")
            row = {"artifact": f"saved_model [{name}]", "max_abs": None, "max_rel": None, "passed": finite,
                   "note": "runs on CPU" + ("" if finite else "; NaN/Inf in its outputs")}
        except Exception as e:  # noqa: BLE001
            row, results = failed_row(f"saved_model [{name}]", e), None
        if name == "serving_default" or serving is None:
            serving = (feeds, results)
        rows.append(dict(row, stack="(whole graph)", judge=None))
    if "onnx" in arts and serving and serving[1] is not None:
        from .exports.runners import onnx_session

        say("onnx: against the SavedModel")
        feeds, want = serving
        try:
            session = onnx_session(os.path.join(out, arts["onnx"]))
            names = [o.name for o in session.get_outputs()]
            row = compare("onnx (onnxruntime)", session.run(names, feeds), [want[n] for n in names], atol, rtol)
        except Exception as e:  # noqa: BLE001
            row = failed_row("onnx (onnxruntime)", e)
        rows.append(dict(row, stack="(whole graph)", judge="the converted SavedModel"))
    return rows


def keras_model_rows(manifest, out, atol, rtol, seed, unchanged, say):
    """A whole Keras model's SavedModel, GraphDef and ONNX against the model rebuilt from stock Keras layers."""
    from .judges import model_judge, run_model_artifacts
    from .readers.keras_model import load_keras_file

    source = manifest["source"].get("checkpoint", "")
    if not (unchanged and os.path.isfile(source)):
        return [{"artifact": "whole model", "stack": "(whole model)", "max_abs": None, "max_rel": None,
                 "passed": None, "judge": None, "note": "skipped: the source .keras file is gone or changed"}]
    model = load_keras_file(source)
    tf = _tf()
    specs = [tf.TensorSpec(t.shape, t.dtype, name=t.name.split(":")[0]) for t in model.inputs]
    names = [s.name for s in specs]
    feeds = sample_inputs([(s.name, s) for s in specs], seed, pad_last=True)
    judge, judge_name = model_judge(model)
    want = judge([feeds[n] for n in names])
    rows = run_model_artifacts(out, manifest, names, feeds, want, atol, rtol, say, model=model)
    return [dict(r, stack="(whole model)", judge=judge_name) for r in rows]
