"""Stock cells cuDNN does not compute whose weights fill its buffers: Keras' reset-before GRU
(``GRU(reset_after=False)``: h~ = tanh(W_h x + b_W_h + R_h (r * h) + b_R_h)) and LSTM / GRU with another activation
(``LSTM(activation="relu")``, the time-series tutorials' model). Each converts as a fused stack whose paths are CPU
ops only; ONNX nodes carry ``linear_before_reset=0`` / ``activations``; TFLite holds the relu LSTM as a fused op and
the GRUs as its builtin-op loop, and skips a sigmoid LSTM with one warning line naming the layer.

- The reference's step against Keras' own ``GRU(reset_after=False)`` layer, its weights read here by Keras'
  documented layout (kernel columns z, r, h; one bias), on a masked ragged batch from non-zero states.
- The reference's LSTM with ``activation="relu"`` against Keras' own layer, read the same way.
- The tutorial model (``LSTM(activation="relu")`` twice, trained by ``fit``): every artifact, its ONNX ``activations``
  and TFLite fused LSTMs judged here against Keras; a sigmoid LSTM: everything but TFLite, one warning per artifact.
- A Sequential model as users save one (``Embedding(mask_zero)``, ``Dropout``, a ``Bidirectional``, trained by
  ``fit``), as ``.keras`` and ``.h5``: every artifact; ONNX ``GRU`` nodes with ``linear_before_reset=0``, a TFLite of
  builtin ops only; both run here against the original's Keras outputs on a padded batch; verify passes.
"""
import json

import numpy as np
import pytest

from helpers import cli, convert_whole, fit_ids_model_and_save, onnx_and_tflite_outputs, op_codes

from cudnn_port import reference
from cudnn_port.canonical import CanonicalRNN, LayerParams
from cudnn_port.layout import RNNSpec
from cudnn_port.stored_spec import spec_from_vector, spec_to_vector

ATOL, RTOL = 1e-5, 1e-4  # the whole-model tolerance: |err| <= ATOL + RTOL * |Keras|


def test_the_spec_says_reset_before_in_every_record():
    spec = RNNSpec("gru", 2, 5, 3, bidirectional=True, reset_after=False)
    assert spec_from_vector(np.array(spec_to_vector(spec), np.int32)) == spec
    assert RNNSpec(**spec.to_dict()) == spec and "reset_after" not in RNNSpec("gru", 1, 5, 3).to_dict()
    assert not spec.cudnn_computes and "GRU (reset before)" in spec.describe()
    with pytest.raises(Exception, match="only a GRU has a reset gate"):
        RNNSpec("lstm", 1, 5, 3, reset_after=False)


def test_reference_reset_before_gru_is_keras_gru_reset_after_false():
    import keras

    B, T, I, H = 3, 6, 4, 5
    rng = np.random.default_rng(8)
    layer = keras.layers.GRU(H, reset_after=False, return_sequences=True, return_state=True)
    x = rng.normal(size=(B, T, I)).astype("float32")
    lengths = np.array([6, 2, 4])
    mask = np.arange(T)[None, :] < lengths[:, None]
    h0 = rng.normal(size=(B, H)).astype("float32")
    layer(x, mask=mask, initial_state=[h0])
    kernel, recurrent, bias = (rng.normal(size=w.shape).astype("float32") * 0.5 for w in layer.get_weights())
    layer.set_weights([kernel, recurrent, bias])
    y, h = (np.asarray(t) for t in layer(x, mask=mask, initial_state=[h0]))
    # Keras' layout: columns in gate order z, r, h; one bias [3H]; cuDNN's order is r, z, h
    block = {"z": slice(0, H), "r": slice(H, 2 * H), "h": slice(2 * H, 3 * H)}
    W = np.stack([kernel[:, block[g]].T for g in "rzh"])
    R = np.stack([recurrent[:, block[g]].T for g in "rzh"])
    b_W = np.stack([bias[block[g]] for g in "rzh"])
    spec = RNNSpec("gru", 1, H, I, reset_after=False)
    canon = CanonicalRNN(spec, [LayerParams(W, R, b_W, np.zeros_like(b_W))])
    want_y, want_h, _ = reference.forward(canon, x, lengths, h0[None])
    np.testing.assert_allclose(want_h[0], h, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(want_y * mask[..., None], y * mask[..., None], atol=1e-5, rtol=1e-4)
    # and it is not the reset-after GRU of the same weights
    after = reference.forward(CanonicalRNN(RNNSpec("gru", 1, H, I), canon.layers), x, lengths, h0[None])
    assert np.abs(after[1][0] - h).max() > 1e-3


def test_reference_relu_lstm_is_keras_lstm_with_relu():
    import keras

    B, T, I, H = 3, 6, 4, 5
    rng = np.random.default_rng(10)
    layer = keras.layers.LSTM(H, activation="relu", return_sequences=True, return_state=True)
    x = rng.normal(size=(B, T, I)).astype("float32")
    lengths = np.array([6, 2, 4])
    mask = np.arange(T)[None, :] < lengths[:, None]
    h0, c0 = rng.normal(size=(B, H)).astype("float32"), rng.normal(size=(B, H)).astype("float32")
    layer(x, mask=mask, initial_state=[h0, c0])
    kernel, recurrent, bias = (rng.normal(size=w.shape).astype("float32") * 0.5 for w in layer.get_weights())
    layer.set_weights([kernel, recurrent, bias])
    y, h, c = (np.asarray(t) for t in layer(x, mask=mask, initial_state=[h0, c0]))
    blocks = [slice(g * H, (g + 1) * H) for g in range(4)]  # Keras' gate order i, f, c, o is cuDNN's
    W, R = (np.stack([k[:, b].T for b in blocks]) for k in (kernel, recurrent))
    b_W = np.stack([bias[b] for b in blocks])
    canon = CanonicalRNN(RNNSpec("lstm", 1, H, I, activation="relu"), [LayerParams(W, R, b_W, np.zeros_like(b_W))])
    want_y, want_h, want_c = reference.forward(canon, x, lengths, h0[None], c0[None])
    np.testing.assert_allclose(want_h[0], h, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(want_c[0], c, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(want_y * mask[..., None], y * mask[..., None], atol=1e-5, rtol=1e-4)


def test_int8_judge_computes_the_cells_own_activation(tmp_path):
    """verify's int8 row for a relu LSTM: the ideal int8 model it sizes its tolerance by computes relu, so an int8
    file whose nodes compute tanh fails (its tolerance was sized by a tanh model, wide enough to pass it)."""
    import onnx

    from cudnn_port.exports.onnx import write_onnx
    from cudnn_port.exports.quantize import quantize_onnx
    from cudnn_port.judging.int8 import int8_row
    from cudnn_port.judging.parity import sample_batch
    from cudnn_port.layout import unpack

    spec = RNNSpec("lstm", 1, 6, 3, activation="relu")
    canon = unpack(spec, np.random.default_rng(13).normal(size=spec.param_count) * 0.4)
    write_onnx(canon, str(tmp_path / "model.onnx"))
    quantize_onnx(str(tmp_path / "model.onnx"), str(tmp_path / "int8.onnx"))
    x, lengths, _, _ = sample_batch(spec, 4, 9, 0)
    feeds = {"inputs": x.astype(np.float32), "sequence_lengths": lengths.astype(np.int32)}
    want = reference.forward(canon, x, lengths)
    assert int8_row("int8", str(tmp_path / "int8.onnx"), spec, canon, feeds, want)["passed"]
    model = onnx.load(str(tmp_path / "int8.onnx"))
    for node in model.graph.node:  # the nodes' own default: tanh
        kept = [a for a in node.attribute if a.name != "activations"]
        del node.attribute[:]
        node.attribute.extend(kept)
    onnx.save(model, str(tmp_path / "tanh.onnx"))
    assert int8_row("int8", str(tmp_path / "tanh.onnx"), spec, canon, feeds, want)["passed"] is False


def test_a_checkpoint_of_a_relu_lstm_layer_is_written_in_keras_style(tmp_path):
    """A fused layer's TF checkpoint of a cell cuDNN does not compute: no TF1 cuDNN cell or PyTorch module holds it,
    so a plain convert writes Keras' names (and verify passes); --style pytorch is refused in one line."""
    import keras
    import tensorflow as tf

    from cudnn_port.layers import CudnnLSTM

    x = keras.Input((None, 3))
    model = keras.Model(x, CudnnLSTM(4, activation="relu", return_sequences=True)(x))
    model.layers[1].opaque_kernel.assign(np.random.default_rng(17).normal(size=model.layers[1].spec.param_count))
    prefix = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt" / "model"))
    done = cli("convert", prefix, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["style"] == "keras"
    verified = cli("verify", tmp_path / "out")
    assert verified.returncode == 0, verified.stdout[-2000:]
    refused = cli("convert", prefix, tmp_path / "torch", "--style", "pytorch")
    errors = [line for line in refused.stderr.splitlines() if line.startswith("cudnn-port: error:")]
    assert refused.returncode == 2 and len(errors) == 1 and errors[0].endswith("use --style keras"), refused.stderr
    assert "writing" not in refused.stderr  # refused before any work
    assert not (tmp_path / "torch").exists()


@pytest.mark.slow
def test_tutorial_relu_lstm_converts_with_fused_nodes_and_a_sigmoid_lstm_skips_only_tflite(tmp_path):
    import keras
    import onnx
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    from cudnn_port import convert, verify

    L = keras.layers
    keras.utils.set_random_seed(11)
    rng = np.random.default_rng(12)
    x = rng.normal(size=(64, 10, 3)).astype("float32")
    model = keras.Sequential([keras.Input((None, 3)), L.LSTM(16, activation="relu", return_sequences=True),
                              L.LSTM(8, activation="relu"), L.Dense(1)])
    model.compile("adam", "mse")
    model.fit(x, x.sum(axis=(1, 2))[:, None], epochs=1, batch_size=16, verbose=0)
    model.save(tmp_path / "relu.keras")
    manifest = convert(tmp_path / "relu.keras", tmp_path / "relu")
    assert {"saved_model", "graphdef", "onnx", "tflite"} <= set(manifest.model_artifacts), manifest.warnings
    assert not manifest.warnings, manifest.warnings
    lstms = [n for n in onnx.load(str(tmp_path / "relu" / "model.onnx")).graph.node if n.op_type == "LSTM"]
    assert len(lstms) == 2 and all([a.strings for a in n.attribute if a.name == "activations"] ==
                                   [[b"Sigmoid", b"Relu", b"Relu"]] for n in lstms)
    builtin, custom = op_codes(tmp_path / "relu" / "model.tflite")
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in builtin and not custom, (builtin, custom)
    probe = rng.normal(size=(3, 7, 3)).astype("float32") * 2
    want = np.asarray(model(probe))
    session = ort.InferenceSession(str(tmp_path / "relu" / "model.onnx"), providers=["CPUExecutionProvider"])
    runner = Interpreter(str(tmp_path / "relu" / "model.tflite")).get_signature_runner("serving_default")
    for got, what in ((session.run(None, {session.get_inputs()[0].name: probe})[0], "onnx"),
                      (next(iter(runner(**{next(iter(runner.get_input_details())): probe}).values())), "tflite")):
        assert np.all(np.abs(got - want) <= ATOL + RTOL * np.abs(want)), (what, float(np.abs(got - want).max()))
    assert verify(tmp_path / "relu")["passed"]

    sigmoid = keras.Sequential([keras.Input((None, 3)), L.LSTM(6, activation="sigmoid", name="soft"), L.Dense(1)])
    sigmoid.compile("adam", "mse")
    sigmoid.fit(x, x.sum(axis=(1, 2))[:, None], epochs=1, batch_size=16, verbose=0)
    sigmoid.save(tmp_path / "sigmoid.keras")
    manifest = convert(tmp_path / "sigmoid.keras", tmp_path / "sigmoid")
    assert {"saved_model", "graphdef", "onnx"} <= set(manifest.model_artifacts) and \
        "tflite" not in manifest.model_artifacts, manifest.model_artifacts
    tflite_lines = [w for w in manifest.warnings if ".tflite not written" in w]
    assert len(tflite_lines) == 2 and all("no sigmoid cell activation" in w for w in tflite_lines), manifest.warnings
    assert "fused layer soft" in next(w for w in tflite_lines if w.startswith("model.tflite")), tflite_lines
    assert verify(tmp_path / "sigmoid")["passed"]


@pytest.fixture(scope="module")
def reset_before_files(tmp_path_factory):
    """A Sequential GRU(reset_after=False) model trained by fit, saved as .keras and .h5; its Keras outputs on a
    padded batch."""
    import keras

    keras.utils.set_random_seed(9)
    model = keras.Sequential([
        keras.layers.Embedding(30, 6, mask_zero=True, embeddings_initializer=keras.initializers.RandomNormal(stddev=1)),
        keras.layers.GRU(9, reset_after=False, return_sequences=True),
        keras.layers.Dropout(0.2),
        keras.layers.Bidirectional(keras.layers.GRU(7, reset_after=False, return_sequences=True)),
    ])
    folder = tmp_path_factory.mktemp("reset_before")
    return (folder, *fit_ids_model_and_save(model, folder, (10, 14)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model.keras", "model.h5"])
def test_stock_reset_before_gru_model_converts_judged_by_keras(reset_before_files, name):
    import onnx

    folder, probe, want = reset_before_files
    out, _, stdout = convert_whole(folder, name, want)
    assert "GRU (reset before)" in stdout and "linear_before_reset=0" in stdout, stdout

    grus = [n for n in onnx.load(str(out / "model.onnx")).graph.node if n.op_type == "GRU"]
    assert len(grus) == 2 and all(a.i == 0 for n in grus for a in n.attribute if a.name == "linear_before_reset")
    builtin, custom = op_codes(out / "model.tflite")
    assert not custom and "WHILE" in builtin, (builtin, custom)

    for got, what in onnx_and_tflite_outputs(out, probe):
        assert got.shape == want.shape, what
        assert np.all(np.abs(got - want) <= ATOL + RTOL * np.abs(want)), (what, float(np.abs(got - want).max()))

    verified = cli("verify", out)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr
