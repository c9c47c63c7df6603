"""A whole model's judge takes each input by its name, not by the order the manifest lists the artifacts' inputs in.

A model of two inputs of one shape (``left`` read by an LSTM, ``right`` by a GRU) exported with its artifacts'
inputs named the other way round (a planted error in the conversion: each artifact takes ``right`` where the model
takes ``left``), the manifest listing them in the artifacts' order, as such a converter writes it. A judge fed in the
manifest's order agreed with every artifact; fed by name, it fails each of them.
"""
import json

import numpy as np
import pytest

from cudnn_port import cli

tf = pytest.importorskip("tensorflow")
pytest.importorskip("onnxruntime")
keras = pytest.importorskip("keras")


def two_inputs(seed=4):
    L = keras.layers
    left, right = keras.Input((None, 5), name="left"), keras.Input((None, 5), name="right")
    merged = L.Concatenate()([L.LSTM(4)(left), L.GRU(3)(right)])
    model = keras.Model([left, right], L.Dense(2)(merged))
    rng = np.random.default_rng(seed)
    model.set_weights([(rng.normal(size=w.shape) * 0.4).astype("float32") for w in model.get_weights()])
    return model


@pytest.mark.slow
def test_an_export_that_binds_its_inputs_the_other_way_round_fails(tmp_path, capsys, monkeypatch):
    import cudnn_port
    from cudnn_port import deps
    from cudnn_port.errors import ParityError
    from cudnn_port.roads import model as road

    real = road.signature_specs

    def swapped(model, ids_dtype):
        specs, warnings = real(model, ids_dtype)
        names = [s.name for s in specs][::-1]
        return [tf.TensorSpec(s.shape, s.dtype, name=n) for s, n in zip(specs, names)], warnings

    with monkeypatch.context() as patch, pytest.raises(ParityError):  # export's own parity, bound by name, says so
        patch.setattr(road, "signature_specs", swapped)
        cudnn_port.export(two_inputs(), tmp_path / "out", formats=["saved_model", "onnx"], keep_failed=True)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["model_inputs"] == ["right", "left"]  # the artifacts' order, the model's names swapped
    x = np.random.default_rng(0).normal(size=(2, 2, 6, 5)).astype("float32")
    served = tf.saved_model.load(str(tmp_path / "out" / "saved_model")).signatures["serving_default"]
    got = list(served(left=tf.constant(x[0]), right=tf.constant(x[1])).values())[0].numpy()
    model = two_inputs()
    assert np.allclose(got, np.asarray(model([x[1], x[0]])), atol=1e-5)  # the plant took: left fed to right
    assert not np.allclose(got, np.asarray(model([x[0], x[1]])), atol=1e-3)

    code = cli.main(["verify", str(tmp_path / "out"), "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    failed = {r["artifact"] for r in report["rows"] if r["passed"] is False}
    onnx = {"onnx (onnxruntime)"} | ({"onnx (openvino f32)"} if deps.available("openvino") else set())
    assert code == 1 and failed == {"saved_model"} | onnx, failed
