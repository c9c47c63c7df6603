"""verify's feeds exercise every mask the model defines, and its judge is the original model's own outputs there.

A whole Keras model (``export``) and a Keras 3 ``model.export`` traced on a GPU host (the graph road) with
``Masking(mask_value=-1.0)``: verify pads with -1 (read from the model's config / from the graph's comparison,
not assumed 0), leaves one row of nothing but padding where the original runs one, and fails exactly the artifacts
that a planted error in the conversion made wrong there, exit 1. Zero vectors, verify's padding before, are data
to such a model: the row of only padding run for a step (0.18 off) and the ONNX Masking compared with NaN (0.88
off) passed with them, exit 0; the ONNX Masking compared with 0 failed either way.
"""
import json
import os
import shutil

import numpy as np
import pytest

from cudnn_port import cli
from cudnn_port.outdir import MANIFEST
from cudnn_port.paths import sha256

tf = pytest.importorskip("tensorflow")
pytest.importorskip("onnxruntime")
keras = pytest.importorskip("keras")

MASK_VALUE = -1.0


def masked_model(seed=3):
    """Masking(-1.0), a Bidirectional LSTM (5 features in, 4 units), a GRU's last output (3 units), Dense: the GRU's
    last output of a row of only padding is zeros, its initial state."""
    L = keras.layers
    x = keras.Input((None, 5), name="features")
    s = L.Bidirectional(L.LSTM(4, return_sequences=True))(L.Masking(mask_value=MASK_VALUE)(x))
    model = keras.Model(x, L.Dense(2)(L.GRU(3)(s)))
    rng = np.random.default_rng(seed)
    model.set_weights([(rng.normal(size=w.shape) * 0.4).astype("float32") for w in model.get_weights()])
    return model


def rehash(out):
    """Rewrite manifest.json's sha256 of every file, as a converter that wrote the artifacts wrong would."""
    path = os.path.join(out, MANIFEST)
    manifest = json.load(open(path))
    manifest["files"] = {rel: sha256(os.path.join(out, rel)) for rel in manifest["files"]}
    json.dump(manifest, open(path, "w"), indent=2)


def verify_fails(out, capsys, expected):
    """``verify OUT`` exits 1 and fails exactly the rows named in ``expected``, no more, no fewer."""
    code = cli.main(["verify", str(out), "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    failed = {r["artifact"] for r in report["rows"] if r["passed"] is False}
    assert code == 1 and not report["passed"], failed
    assert failed == set(expected), (sorted(failed), sorted(expected))
    return report


def onnx_rows():
    from cudnn_port import deps

    return {"onnx (onnxruntime)"} | ({"onnx (openvino f32)"} if deps.available("openvino") else set())


def test_whole_model_feeds_pad_with_the_models_own_mask_value_and_leave_a_row_of_only_padding():
    from cudnn_port.judging.parity import model_feeds

    model = masked_model()
    feeds = model_feeds(model, ["features"], [tf.TensorSpec([None, None, 5], tf.float32)], seed=0)["features"]
    assert feeds.shape == (3, 7, 5)
    assert np.all(feeds[1] == MASK_VALUE) and np.all(feeds[2, 2:] == MASK_VALUE)  # all padding; padding from step 2
    assert not np.any(feeds[0] == MASK_VALUE) and not np.any(feeds[2, :2] == MASK_VALUE) and np.all(feeds[0] != 0)
    want = np.asarray(model(feeds))  # Keras' own answer on the row of only padding: Dense of the GRU's zero state
    assert np.allclose(want[1], model.layers[-1].bias.numpy(), atol=1e-6)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The masked model exported whole (SavedModel, ONNX) once, right: its out folder."""
    import cudnn_port

    out = tmp_path_factory.mktemp("masked") / "out"
    cudnn_port.export(masked_model(), out, formats=["saved_model", "onnx"])
    return out


@pytest.mark.slow
def test_a_right_export_passes_on_the_padded_feeds(exported):
    assert cli.main(["verify", str(exported), "--quiet"]) == 0


@pytest.mark.slow
def test_a_rewrite_that_runs_a_row_of_only_padding_for_one_step_fails(tmp_path, capsys, monkeypatch):
    """Planted in the rewrite: a row whose mask keeps no step is run for one step (its mask's length 0 taken as 1),
    so the GRU's last output there is a state, not Keras' zeros. Only a row of nothing but padding shows it."""
    import cudnn_port
    from cudnn_port.keras_models import stock_adapter
    from cudnn_port.errors import ParityError

    real = stock_adapter._plan

    def one_step_at_least(mask):
        order, lengths, counts, _ = real(mask)
        lengths = tf.maximum(lengths, 1)
        return order, lengths, counts, tf.sequence_mask(lengths, tf.shape(mask)[1])

    with monkeypatch.context() as patch, pytest.raises(ParityError, match="saved_model, onnx"):
        patch.setattr(stock_adapter, "_plan", one_step_at_least)  # export's own parity, the same feeds, says so too
        cudnn_port.export(masked_model(), tmp_path / "out", formats=["saved_model", "onnx"], keep_failed=True)
    got = tf.saved_model.load(str(tmp_path / "out" / "saved_model")).signatures["serving_default"]
    x = np.full((2, 4, 5), MASK_VALUE, np.float32)
    x[0] = np.random.default_rng(1).normal(size=(4, 5))
    off = np.abs(list(got(features=tf.constant(x)).values())[0].numpy() - np.asarray(masked_model()(x)))
    assert off[0].max() < 1e-5 < off[1].max()  # the plant took, on the row of only padding alone
    verify_fails(tmp_path / "out", capsys, {"saved_model"} | onnx_rows())


@pytest.mark.slow
@pytest.mark.parametrize("value", [np.nan, 0.0], ids=["mask ignored", "mask value 0"])
def test_an_onnx_whose_masking_compares_with_another_value_fails(tmp_path, exported, capsys, value):
    """The ONNX writer's Masking compares the features with NaN (nothing is ever padding: the mask ignored) or with
    0 (the value assumed, not read): only model.onnx is wrong, and only its rows fail."""
    import onnx
    from onnx import numpy_helper

    out = tmp_path / "out"
    shutil.copytree(exported, out)
    model = onnx.load(str(out / "model.onnx"))
    compared = {i for n in model.graph.node if n.op_type == "Equal" for i in n.input}
    found = [k for k, init in enumerate(model.graph.initializer) if init.name in compared and
             numpy_helper.to_array(init).size == 1 and numpy_helper.to_array(init).reshape(-1)[0] == MASK_VALUE]
    assert len(found) == 1, found  # the Masking layer's constant
    init = model.graph.initializer[found[0]]
    init.CopyFrom(numpy_helper.from_array(np.array(value, np.float32), init.name))
    onnx.save(model, str(out / "model.onnx"))
    rehash(out)
    verify_fails(out, capsys, onnx_rows())


# ------------------------------------------------------------------------------- the graph road
@pytest.fixture(scope="module")
def gpu_host_masked(tmp_path_factory):
    """The masked model's Keras 3 ``model.export``, traced as on a CUDA host (cuDNN nodes): the source folder."""
    from test_sources import traced_as_on_a_gpu_host

    path = tmp_path_factory.mktemp("gpu_host") / "masked"
    with traced_as_on_a_gpu_host():
        masked_model().export(str(path), verbose=False)
    return path


@pytest.mark.slow
def test_graph_feeds_read_the_mask_value_from_the_graph(gpu_host_masked):
    from cudnn_port.judging.graph_inputs import masking_values
    from cudnn_port.judging.signature_feeds import signature_feeds

    serving = tf.saved_model.load(str(gpu_host_masked)).signatures["serving_default"]
    assert masking_values(serving) == {"features": MASK_VALUE}
    feeds, note = signature_feeds(serving, 0, empty_row=True)
    x = feeds["features"]
    assert np.all(x[-1, 2:] == MASK_VALUE) and np.all(x[1] == MASK_VALUE) and not np.any(x[0] == MASK_VALUE)
    assert "features (Masking value -1)" in note and "row 1 all padding" in note, note


@pytest.mark.slow
def test_graph_rewrite_that_ignores_sequence_lengths_fails_on_rows_padded_with_the_mask_value(
        tmp_path, gpu_host_masked, capsys, monkeypatch):
    """The rewrite's CPU function (planted) runs every row to the full length, ignoring the lengths the
    Masking(-1.0) gives the cuDNN nodes. With zero vectors as padding the original (which reads them as data)
    agreed; padded with -1 the last row ends elsewhere, and both signatures of OUT/saved_model fail against the
    original. Keras' cuDNN graph refuses a row of only padding, so verify leaves it out there and says so."""
    from cudnn_port import convert
    from cudnn_port.graphs import rewrite

    real = rewrite.cudnn_op_cpu
    with monkeypatch.context() as patch:
        patch.setattr(rewrite, "cudnn_op_cpu", lambda spec, time_major, count, *args: real(
            spec, time_major, count, *args[:4]))
        convert(str(gpu_host_masked), tmp_path / "out")
    report = verify_fails(tmp_path / "out", capsys, {"saved_model [serve]", "saved_model [serving_default]"})
    notes = [r["note"] for r in report["rows"] if r["artifact"].startswith("saved_model [")]
    assert all("Masking value -1" in n and "no row of only padding: the original refuses one" in n for n in notes)
