"""verify's judge of the whole model a Keras 2 ``.h5`` is rebuilt into (``OUT/keras/model.keras``): the model built
from the source file's own ``model_config`` and every array of its ``model_weights``
(:mod:`cudnn_port.judging.keras2_model`), checked here against tf_keras's own outputs stored at fixture time, and
shown to fail what the converter writes wrong outside the recurrent layers (planted in the conversion's path: the
rebuild writes the Dense head with another activation or other weights, or drops a Bidirectional's backward half),
which a judge made from the rebuilt model's own architecture shared and passed."""
import json
import os
import shutil

import numpy as np
import pytest

from helpers import run_cli
from cudnn_port import convert

tf = pytest.importorskip("tensorflow")
h5py = pytest.importorskip("h5py")

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
TAGGER = os.path.join(FIXTURES, "keras2_cudnn_model.h5")  # Sequential: Embedding, Bi(CuDNNLSTM), CuDNNLSTM, ...
BIDIRECTIONAL = os.path.join(FIXTURES, "keras27_bidirectional_model.h5")  # Functional, tf.keras 2.7 config
FORMATS = ["checkpoint", "keras"]
# the judge (float32 Keras 3) against tf_keras's float32 outputs of the same weights: the same kernels' math
ATOL = 1e-5
WHOLE = ("(whole model)", "keras/model.keras (Keras 3 rebuild of the whole model)")


def verdict(capsys, out):
    """``cudnn-port verify OUT --json``: (exit code, {(stack, artifact) of each failed row}, the report)."""
    code, text, err = run_cli(capsys, "verify", out, "--json", "--quiet")
    report = json.loads(text)
    return code, {(r["stack"], r["artifact"]) for r in report["rows"] if r["passed"] is False}, report


def whole_row(report):
    return next(r for r in report["rows"] if r["stack"] == WHOLE[0])


@pytest.mark.parametrize("path, expected, inputs", [
    (TAGGER, "keras2_expected.npz", "ids"), (BIDIRECTIONAL, "keras27_bidirectional_expected.npz", "inputs")],
    ids=["sequential", "functional"])
def test_the_judge_computes_what_tf_keras_computed(path, expected, inputs):
    """The judge built from each fixture's config and arrays against tf_keras's own outputs (its loader converted
    the CuDNN weights; stored when the fixture was made): a Sequential tagger of ids and a tf.keras 2.7 functional
    model of Bidirectional LSTM / GRU / LSTM (the last giving its last step only)."""
    from cudnn_port.judging.keras2_model import judge_from_file

    with np.load(os.path.join(FIXTURES, expected)) as data:
        x, want = data[inputs], data["outputs"]
    got = np.asarray(judge_from_file(path)(x, training=False))
    assert got.shape == want.shape
    err = float(np.max(np.abs(got - want)))
    assert err <= ATOL, f"{os.path.basename(path)}: judge vs tf_keras {err:.3g}"


@pytest.fixture(scope="module")
def tagger_out(tmp_path_factory):
    """The tagger converted untampered (its source copied next to OUT)."""
    folder = tmp_path_factory.mktemp("tagger")
    shutil.copyfile(TAGGER, folder / "model.h5")
    convert(folder / "model.h5", folder / "out", formats=FORMATS)
    return folder / "out"


def test_the_untampered_rebuild_passes(capsys, tagger_out):
    from cudnn_port.judging.keras2_model import JUDGE

    code, failed, report = verdict(capsys, tagger_out)
    row = whole_row(report)
    assert code == 0 and not failed and row["passed"] is True, row
    assert row["judge"] == JUDGE and "model_config" in row["judge"]
    assert row["max_abs"] <= ATOL  # the same float32 Keras 3 math on the same weights


def _rebuild_then(monkeypatch, edit):
    """Plants ``edit(model) -> model`` in the converter: the rebuild (``save_keras3_model``, as convert's stack
    road calls it) writes its model, which is then edited and written again, all inside convert."""
    import keras

    from cudnn_port.roads import stack

    real = stack.save_keras3_model

    def planted(source, path):
        problem = real(source, path)
        edit(keras.saving.load_model(path, compile=False)).save(path)
        return problem

    monkeypatch.setattr(stack, "save_keras3_model", planted)


def _other_weights(model):
    head = model.get_layer("head")
    kernel, bias = head.get_weights()
    head.set_weights([kernel, bias + 0.05])  # each output moves by 0.05: 5000x the tolerance
    return model


@pytest.mark.parametrize("plant", ["activation", "weights"])
def test_a_dense_the_converter_writes_wrong_fails_only_the_whole_model_row(tmp_path, capsys, monkeypatch, plant):
    """(a) The rebuild writes the Dense head with relu for its linear activation (in the converter's config
    rewrite), or with its bias moved: every per-stack row still passes (the head is no stack's), the whole model's
    row fails, verify exits 1. A judge of the rebuilt model's own architecture shared both errors."""
    from cudnn_port.exports import keras_rebuild

    if plant == "activation":
        real = keras_rebuild._standard_config

        def relu_head(layer):
            real(layer)
            for child in (layer or {}).get("config", {}).get("layers") or [] if isinstance(layer, dict) else []:
                if child["config"].get("name") == "head":
                    child["config"]["activation"] = "relu"

        monkeypatch.setattr(keras_rebuild, "_standard_config", relu_head)
    else:
        _rebuild_then(monkeypatch, _other_weights)
    shutil.copyfile(TAGGER, tmp_path / "model.h5")
    convert(tmp_path / "model.h5", tmp_path / "out", formats=FORMATS)
    if plant == "activation":  # the plant took
        import keras

        head = keras.saving.load_model(tmp_path / "out" / "keras" / "model.keras").get_layer("head")
        assert head.activation.__name__ == "relu"
    code, failed, report = verdict(capsys, tmp_path / "out")
    assert code == 1 and failed == {WHOLE}, sorted(failed)
    judged = [r for r in report["rows"] if r["stack"] != WHOLE[0] and r["passed"] is not None]
    assert len(judged) >= 10 and all(r["passed"] for r in judged)


def _backward_dropped(model):
    """The functional model with its last Bidirectional (bi_lstm_2, last step only, 2 x 6 units) replaced by its
    forward LSTM, and the Dense head after it given the rows of the forward half of its kernel: a whole model that
    runs, one direction short."""
    import keras

    x = inputs = keras.Input(shape=(None, 6), name="features")
    for name in ("bi_lstm_1", "bi_gru"):
        x = model.get_layer(name)(x)
    x = model.get_layer("bi_lstm_2").forward_layer(x)
    kernel, bias = model.get_layer("head").get_weights()
    head = keras.layers.Dense(kernel.shape[1], name="head")
    y = head(x)
    head.set_weights([kernel[:x.shape[-1]], bias])
    return keras.Model(inputs, y)


def test_a_rebuild_that_drops_a_backward_half_fails_only_the_whole_model_row(tmp_path, capsys, monkeypatch):
    """(b) The rebuild drops the backward half of the functional model's last Bidirectional: the per-stack rows
    (read from the file) pass, the whole model's row fails, verify exits 1."""
    _rebuild_then(monkeypatch, _backward_dropped)
    shutil.copyfile(BIDIRECTIONAL, tmp_path / "model.h5")
    convert(tmp_path / "model.h5", tmp_path / "out", formats=FORMATS)
    import keras

    rebuilt = keras.saving.load_model(tmp_path / "out" / "keras" / "model.keras")
    assert "Bidirectional" not in [type(layer).__name__ for layer in rebuilt.layers[-2:]]  # the plant took
    code, failed, report = verdict(capsys, tmp_path / "out")
    assert code == 1 and failed == {WHOLE}, sorted(failed)
    assert any(r["stack"] == "bi_lstm_2/opaque_kernel" and r["passed"] for r in report["rows"])


def _edited_source(tmp_path, edit):
    """A copy of the tagger's source with ``edit(h5py.File)`` applied."""
    path = tmp_path / "edited.h5"
    shutil.copyfile(TAGGER, path)
    with h5py.File(path, "r+") as f:
        edit(f)
    return str(path)


def _row_on(tagger_out, source):
    """The whole model's row for the untampered OUT, its judge reading ``source``."""
    from cudnn_port.judging.keras2_model import rebuilt_model_row
    from cudnn_port.judging.parity import ATOL as VERIFY_ATOL, RTOL
    from cudnn_port.manifest import load_manifest

    manifest = load_manifest(str(tagger_out))
    manifest["source"]["checkpoint"] = source
    return rebuilt_model_row(manifest, str(tagger_out), True, 0, VERIFY_ATOL, RTOL)


def test_a_lambda_layer_leaves_the_row_unjudged(tmp_path, tagger_out):
    """A Lambda in the config is code: the judge does not run it, and the row is unjudged (verify fails it unless
    --allow-unjudged), saying so."""
    def add_lambda(f):
        config = json.loads(f.attrs["model_config"])
        config["config"]["layers"].insert(3, {"class_name": "Lambda", "config": {
            "name": "scale", "function": ["4wEAAAAAAAAA", None, None], "function_type": "lambda"}})
        f.attrs["model_config"] = json.dumps(config)

    row = _row_on(tagger_out, _edited_source(tmp_path, add_lambda))
    assert row["passed"] is None and row["unjudged"] and "Lambda" in row["note"], row


def test_an_array_no_layer_takes_fails_the_row_naming_it(tmp_path, tagger_out):
    """An array under model_weights that no variable of the model the config builds takes fails the row, named."""
    def extra(f):
        group = f["model_weights"]["head"]
        group.create_dataset("head/extra:0", data=np.random.default_rng(3).normal(size=(3,)).astype("float32"))
        group.attrs["weight_names"] = np.array(list(group.attrs["weight_names"]) + [b"head/extra:0"], "S")

    row = _row_on(tagger_out, _edited_source(tmp_path, extra))
    assert row["passed"] is False and "head/head/extra:0" in row["note"], row


def test_a_weight_the_file_lacks_fails_the_row_naming_it(tmp_path, tagger_out):
    """A layer of the config whose array the file does not hold: no variable is left at Keras' initial value."""
    def lacking(f):
        group = f["model_weights"]["head"]
        del group["head/bias:0"]
        group.attrs["weight_names"] = np.array([n for n in group.attrs["weight_names"] if "bias" not in str(n)], "S")

    row = _row_on(tagger_out, _edited_source(tmp_path, lacking))
    assert row["passed"] is False and "head" in row["note"] and "bias" in row["note"], row


def _tagger_config():
    with h5py.File(TAGGER, "r") as f:
        return json.loads(f.attrs["model_config"])


def _plain_lstm_hard_sigmoid(config):
    layer = config["config"]["layers"][3]  # CuDNNLSTM "lstm"
    layer["class_name"] = "LSTM"
    layer["config"].update(activation="tanh", recurrent_activation="hard_sigmoid")


def _nested(config):
    inner = {"class_name": "Sequential", "config": {"name": "inner", "layers": config["config"]["layers"][-1:]}}
    config["config"]["layers"][-1] = inner


def _half_precision(config):
    config["config"]["layers"][-1]["config"]["dtype"] = "float16"


@pytest.mark.parametrize("edit, said", [(_plain_lstm_hard_sigmoid, "hard_sigmoid"), (_nested, "Sequential"),
                                        (_half_precision, "float16")], ids=["hard_sigmoid", "nested", "float16"])
def test_what_the_judge_does_not_build_is_refused_saying_which(edit, said):
    """Keras 2's hard_sigmoid (clip(0.2 x + 0.5)) is not Keras 3's, a nested model and a half-precision layer are not
    in the table: the judge refuses (the row is then unjudged), naming the layer and what it holds."""
    from cudnn_port.judging.keras2_config import Unjudged, build_model

    config = _tagger_config()
    edit(config)
    with pytest.raises(Unjudged, match=said):
        build_model(config)


def test_a_keras_2_0_sequential_config_builds_the_same_model():
    """Keras 2.0 to 2.2.2 wrote a Sequential's config as its list of layers: the judge builds the same layers."""
    from cudnn_port.judging.keras2_config import build_model

    config = _tagger_config()
    listed = build_model({"class_name": "Sequential", "config": config["config"]["layers"]})
    assert [layer.get_config() for layer in listed.layers[1:]] == \
        [layer.get_config() for layer in build_model(config).layers[1:]]
