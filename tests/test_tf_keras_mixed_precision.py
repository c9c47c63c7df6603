"""tf_keras SavedModels whose cuDNN nodes compute in float16 (the ``mixed_float16`` policy GPU training uses) or
float64 (tests/fixtures/make_tf_keras_mixed_precision.py, tf_keras 2.21 on tensorflow-cpu, the build reported as
CUDA; tf_keras is not needed here). onnxruntime's CPU LSTM and GRU compute in float32 (float64: "does not support
double yet"), so model.onnx casts to float32 around each fused node and back, keeping the signature's dtypes.

The judge is tf_keras itself: ``expected.npz`` holds the original ``serving_default``'s outputs, computed on CPU by
stock TensorFlow when the fixtures were made.
"""
import os

import numpy as np
import pytest

from helpers import ROOT, run_cli, unpack_fixture

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow  # SavedModels converted to every artifact
ARCHIVE = os.path.join(ROOT, "tests", "fixtures", "tf_keras_mixed_precision.tar.xz")
# float16: tf_keras rounds every op of every step to float16 (eps 9.8e-4), the ONNX only each layer's outputs; the
# outputs are below 1: about 2 float16 ulps. Measured 6.6e-5 here (3.1e-4 on a larger draw). float64: the ONNX
# computes in float32 (onnxruntime's CPU kernels), measured 5.5e-9 (fp32's 1e-5); the SavedModel: 0 (the same ops).
ATOL = {"three_lstms_fp16": 2e-3, "masked_gru_fp16": 2e-3, "lstm_float64": 1e-5}


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return unpack_fixture(tmp_path_factory, ARCHIVE, "tf_keras_mixed_precision")


@pytest.mark.parametrize("name", sorted(ATOL))
def test_cudnn_nodes_of_any_float_dtype_convert_and_match_the_original(tmp_path, capsys, fixtures, name):
    from cudnn_port.exports.runners import onnx_session

    folder, expected = fixtures
    feeds = {k.split("/", 2)[2]: v for k, v in expected.items() if k.startswith(f"{name}/in/")}
    want = {k.split("/", 2)[2]: v for k, v in expected.items() if k.startswith(f"{name}/out/")}
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "convert", folder / name, out)
    assert code == 0, err
    code, report, err = run_cli(capsys, "verify", out)  # its defaults: float16 outputs get float16's tolerance
    assert code == 0, report + err
    session = onnx_session(out / "model.onnx")
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    signature = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    saved = {k: v.numpy() for k, v in signature(**feeds).items()}
    assert set(got) == set(want) == set(saved)
    for key, value in want.items():
        assert got[key].dtype == value.dtype, f"{name} ONNX {key}: {got[key].dtype}, the original {value.dtype}"
        np.testing.assert_allclose(got[key].astype(np.float64), value.astype(np.float64), atol=ATOL[name], rtol=0,
                                   err_msg=f"{name} ONNX {key}")
        np.testing.assert_allclose(saved[key].astype(np.float64), value.astype(np.float64), atol=ATOL[name], rtol=0,
                                   err_msg=f"{name} SavedModel {key}")
