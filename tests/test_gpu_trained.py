"""Cross-device parity on weights a GPU trained: stock Keras 3 models trained on an H200 with real cuDNN (torch and JAX
backends, float32 and mixed_float16; tests/fixtures/gpu_keras/README.md says how), each converted here on CPU.

Two judges, neither of them this project's code:
- Keras on CPU, the original model (convert's whole-model parity, 1e-5 + 1e-4 relative; ``verify`` again);
- the GPU: every whole-model artifact on the batch the GPU ran, against what the GPU computed with TF32 off
  (``gpu_fp32_0``), within 2x Keras' own CPU-vs-GPU distance on that batch (with a 1e-6 floor): an artifact may be
  no further from the GPU than Keras itself is.
A mixed_float16 model's artifacts compute in float32: they are judged by the model rebuilt in float32, and their
distance to the GPU's float16 outputs is reported (manifest ``precision``, verify's ``info`` row), within the
float16 rounding the original computes with (2x Keras-on-CPU-in-float16's own distance to the GPU).
"""
import glob
import os

import numpy as np
import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "gpu_keras")
CASES = sorted(os.path.relpath(p, FIXTURES)[:-len(".keras")] for p in glob.glob(os.path.join(FIXTURES, "*", "*.keras")))


def test_every_fixture_is_here():
    """10 float32 models (4 torch, 4 JAX) and 2 mixed_float16 ones, each with the batch the GPU ran."""
    assert len(CASES) == 10, CASES
    for case in CASES:
        assert os.path.isfile(os.path.join(FIXTURES, case + ".npz")), case


def _artifacts_on(out, manifest, model, feeds, want, atol):
    """Every whole-model artifact of ``out`` on ``feeds``, against ``want`` within ``atol``: the rows."""
    import tensorflow as tf

    from cudnn_port.formats.jobs import ModelJob
    from cudnn_port.judging.artifact_rows import model_artifact_rows

    names = manifest["model_inputs"]
    specs = [tf.TensorSpec(None, tf.as_dtype(feeds[n].dtype), name=n) for n in names]
    job = ModelJob(model, specs, str(out), None)
    job.manifest = manifest
    return model_artifact_rows(str(out), job, feeds, want, atol, 0.0, lambda message: None)


@pytest.mark.parametrize("case", CASES)
def test_gpu_trained_model_converts_and_matches_keras_on_cpu_and_the_gpu(case, tmp_path):
    import keras

    from cudnn_port import convert, verify

    data = np.load(os.path.join(FIXTURES, case + ".npz"))
    out = tmp_path / "out"
    manifest = convert(os.path.join(FIXTURES, case + ".keras"), out)  # raises ParityError against Keras on CPU
    assert manifest["parity"]["passed"], manifest["parity"]
    assert {"saved_model", "graphdef", "onnx", "tflite"} <= set(manifest.model_artifacts), manifest.warnings
    report = verify(out)
    assert report["passed"], [r for r in report["rows"] if r["passed"] is False]

    try:
        original = keras.saving.load_model(os.path.join(FIXTURES, case + ".keras"), compile=False)
    except (TypeError, ValueError):  # an older Keras (3.12) refuses options 3.15 wrote with their default None
        from cudnn_port.readers.keras_model import load_keras_file

        original = load_keras_file(os.path.join(FIXTURES, case + ".keras"))  # drops only those; Keras computes
    names = manifest["model_inputs"]
    feeds = {n: data[f"x_{n}"] for n in names}
    gpu = data["gpu_fp32_0"].astype(np.float64)
    keras_cpu = np.asarray(original.predict([feeds[n] for n in names] if len(names) > 1 else feeds[names[0]],
                                            verbose=0), np.float64)
    keras_distance = float(np.max(np.abs(keras_cpu - gpu)))
    bound = max(2 * keras_distance, 1e-6)
    rows = _artifacts_on(out, manifest, original, feeds, [gpu], bound)
    ran = [r for r in rows if r["passed"] is not None]
    assert len(ran) >= 4, rows  # saved_model, graphdef, onnx (onnxruntime, openvino), tflite
    assert all(r["passed"] for r in ran), (f"Keras on CPU is {keras_distance:.2e} from the GPU", rows)
    if case.startswith("torch_mixed16/"):
        precision = manifest["precision"]
        assert precision["policy"] == "mixed_float16" and 0 < precision["max_abs_to_original"] < 1e-1, precision
        info = [r for r in report["rows"] if r.get("reported")]
        assert len(info) == 1 and info[0]["max_abs"] > 0, info
    else:
        assert "precision" not in manifest
