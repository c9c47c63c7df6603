"""verify's rows for whole graphs: a converted SavedModel source, and a whole Keras model's export."""
import os

import numpy as np

from ..deps import import_tf
from .parity import compare, failed_row, sample_inputs


def saved_model_rows(manifest, out, atol, rtol, seed, say):
    """A converted SavedModel: every signature runs on CPU with finite outputs, and the ONNX model agrees with the
    serving signature. (The NumPy reference judges the replacement of each kind of cuDNN node in the test suite; a
    whole foreign graph has no reference here.)"""
    tf = import_tf()
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
        from ..exports.runners import onnx_session

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
    """A whole Keras model's SavedModel, GraphDef and ONNX against the model with each fused layer rebuilt from
    stock Keras layers (from the source .keras file, or from OUT/keras/model.keras when the source is gone); the
    int8 model by its task cost, when OUT holds a task."""
    import json

    from .stock import model_judge, run_model_artifacts
    from ..readers.keras_model import load_keras_file

    source = manifest["source"].get("checkpoint", "")
    copy = os.path.join(out, manifest["model_artifacts"].get("keras", "keras/model.keras"))
    path, where = (source, "the source") if unchanged and os.path.isfile(source) else (copy, "OUT/keras/model.keras")
    try:
        model = load_keras_file(path)
    except Exception as e:  # noqa: BLE001 (a model that does not load is a failed check)
        return [dict(failed_row(f"whole model ({where})", e), stack="(whole model)", judge=None)]
    tf = import_tf()
    names = manifest.get("model_inputs") or [t.name.split(":")[0] for t in model.inputs]  # as exported: a reloaded
    specs = [tf.TensorSpec(t.shape, t.dtype) for t in model.inputs]  # model may name unnamed inputs otherwise
    feeds = sample_inputs(list(zip(names, specs)), seed, pad_last=True)
    judge, judge_name = model_judge(model)
    want = judge([feeds[n] for n in names])
    rows = run_model_artifacts(out, manifest, names, feeds, want, atol, rtol, say)
    judge_name = f"{judge_name} ({where})"
    if "onnx_int8" in manifest["model_artifacts"]:
        rows.append(_int8_model_row(out, manifest, names, feeds, want))
    if manifest.get("task") and "onnx_int8" in manifest["model_artifacts"] and len(names) == 1:
        from ..exports.runners import onnx_session
        from .tasks import task_row

        with open(os.path.join(out, manifest["task"])) as f:
            task = json.load(f)
        say("task: fp32 and int8 ONNX")
        runs = [onnx_session(os.path.join(out, manifest["model_artifacts"][k])) for k in ("onnx", "onnx_int8")]
        try:
            rows.append(task_row(task, *(lambda ids, s=s: s.run(["output_0"], {names[0]: ids})[0] for s in runs)))
        except Exception as e:  # noqa: BLE001
            rows.append(failed_row("task: next-token loss", e))
    return [dict(r, stack="(whole model)", judge=judge_name) for r in rows]


def _int8_model_row(out, manifest, names, feeds, want):
    """The whole model's int8 ONNX: it runs with the same interface; its error against the judge is reported. Its
    LSTM weights are judged in each layer's int8 row, its cost on the task's row (a skip where there is no task)."""
    from ..exports.runners import onnx_session

    name = "onnx int8 (onnxruntime)"
    try:
        session = onnx_session(os.path.join(out, manifest["model_artifacts"]["onnx_int8"]))
        got = session.run([f"output_{i}" for i in range(len(want))], {n: feeds[n] for n in names})
    except Exception as e:  # noqa: BLE001
        return failed_row(name, e)
    row = compare(name, got, want, np.inf, 0.0)
    finite = all(np.isfinite(g).all() for g in got)
    judged = bool(manifest.get("task"))
    return dict(row, passed=None if finite else False, max_rel=None,
                note=("error against the fp32 judge, for reference; judged by the task row below" if judged else
                      "skipped: no task.json beside the model to judge int8's cost by; its layers' int8 rows judge "
                      "the weights") if finite else "NaN/Inf in its outputs")
