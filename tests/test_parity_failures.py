"""A failed whole-model parity check is loud: export raises, the CLI exits 1, --json says "passed": false, and no
OUT is left unless asked for; a model with several inputs and outputs exports and passes."""
import json
import os

import numpy as np
import pytest

from cudnn_port import cli
from cudnn_port.errors import ParityError
from helpers import reference_outputs, tagger

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
from cudnn_port.layers import CudnnGRU, CudnnLSTM  # noqa: E402
pytestmark = pytest.mark.slow  # whole models exported


@pytest.fixture
def broken(monkeypatch):
    """Every fused layer's inference path (what the whole model's SavedModel and GraphDef are traced from) off by
    1e-3: a broken export the stock-Keras judge must catch."""
    import cudnn_port.exports.tensorflow
    import cudnn_port.tf_train  # noqa: F401  and so does the training path (its projection fallback), for later tests
    from cudnn_port import tf_graph

    real = tf_graph.stack_forward

    def off(*args, **kwargs):
        outputs, h, c = real(*args, **kwargs)
        return outputs + 1e-3, h, c

    monkeypatch.setattr(tf_graph, "stack_forward", off)


def test_a_broken_export_raises_and_leaves_nothing(tmp_path, broken):
    import cudnn_port

    with pytest.raises(ParityError, match="FAILED for saved_model, graphdef") as failure:
        cudnn_port.export(tagger(), tmp_path / "out")
    assert not failure.value.report["passed"] and failure.value.report_path is None
    assert os.listdir(tmp_path) == []
    with pytest.raises(ParityError, match="kept") as kept:
        cudnn_port.export(tagger(), tmp_path / "kept", keep_failed=True)
    report = json.loads(open(kept.value.report_path).read())
    assert not report["passed"] and {r["artifact"] for r in report["rows"] if not r["passed"]} == \
        {"saved_model", "graphdef"}


def test_cli_exits_1_on_a_broken_export(tmp_path, capsys, monkeypatch):
    tagger().save(tmp_path / "tagger.keras")
    import cudnn_port.exports.tensorflow
    import cudnn_port.tf_train  # noqa: F401
    from cudnn_port import tf_graph

    real = tf_graph.stack_forward
    monkeypatch.setattr(tf_graph, "stack_forward", lambda *a, **k: (lambda r: (r[0] * 1.01, r[1], r[2]))(real(*a, **k)))
    code = cli.main(["convert", str(tmp_path / "tagger.keras"), str(tmp_path / "out"), "--json", "--quiet"])
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert code == 1 and result["passed"] is False and result["exit_code"] == 1
    assert len(captured.err.strip().splitlines()) == 1 and "parity FAILED" in captured.err
    assert not (tmp_path / "out").exists()


def test_several_inputs_and_outputs(tmp_path):
    """Two inputs (tokens and features), two outputs (a sequence tagger and a pooled classifier), an LSTM and a GRU
    with states passed between them."""
    import cudnn_port
    from cudnn_port.verify import verify

    keras.utils.set_random_seed(5)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    features = keras.Input((None, 3), name="features")
    x = keras.layers.Concatenate()([keras.layers.Embedding(12, 5, mask_zero=True)(tokens), features])
    seq, h, c = CudnnLSTM(6, num_layers=2, return_sequences=True, return_state=True, name="enc")(x)
    y = CudnnGRU(4, bidirectional=True, name="dec")(seq)
    pooled = keras.layers.Concatenate()([y, h[:, -1]])
    model = keras.Model([tokens, features], [keras.layers.Dense(3, name="tags")(seq),
                                            keras.layers.Dense(2, name="cls")(pooled)])
    manifest = cudnn_port.export(model, tmp_path / "out")
    assert manifest["parity"]["passed"] and len(manifest["graphdef_nodes"]["outputs"]) == 2
    ids = np.array([[3, 4, 5, 0], [1, 2, 0, 0]], np.int32)
    feats = np.random.default_rng(0).normal(size=(2, 4, 3)).astype(np.float32)
    want = reference_outputs(model, [ids, feats])  # the NumPy reference, not the fused layers' own CPU path
    from cudnn_port.exports.runners import onnx_session

    session = onnx_session(tmp_path / "out" / "model.onnx")
    got = session.run(["output_0", "output_1"], {"tokens": ids, "features": feats})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-4)
    loaded = tf.saved_model.load(str(tmp_path / "out" / "saved_model")).signatures["serving_default"]
    result = loaded(tokens=ids, features=feats)
    for k, w in enumerate(want):
        np.testing.assert_allclose(result[f"output_{k}"].numpy(), w, atol=1e-5, rtol=1e-4)
    assert verify(tmp_path / "out")["passed"]
