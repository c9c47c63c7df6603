"""cuDNN's plain RNN cells (``rnn_tanh`` / ``rnn_relu``: h' = act(W x + b_W + R h + b_R)) and Keras' ``SimpleRNN``.

- The layout of a plain RNN buffer (G = 1) read two ways: :meth:`RNNSpec.blocks` and the cuDNN-API statement of
  verify's judge (:mod:`cudnn_port.judging.cudnn_api`), which share no code.
- The fused layers ``CudnnRNNTanh`` / ``CudnnRNNRelu`` on CPU against the float64 NumPy reference (ragged batch,
  non-zero states, two layers, both directions, input size != hidden size), and their gradient against central
  differences of the loss.
- Stock ``SimpleRNN`` models as users save them (Sequential with ``Embedding(mask_zero)``, ``Dropout`` and a
  ``Bidirectional``, trained by ``fit``, saved as ``.keras`` and ``.h5``): each converts with every artifact, its ONNX
  holds fused ``RNN`` nodes and its TFLite ``UNIDIRECTIONAL_SEQUENCE_RNN`` (builtin ops only), both judged here by the
  original model's own Keras outputs on a padded batch; verify passes.
"""
import json

import numpy as np
import pytest

from helpers import WHOLE_TOLERANCE, cli, convert_fitted, fit_ids_model_and_save, op_codes

from cudnn_port import reference
from cudnn_port.judging.cudnn_api import matrices_and_biases
from cudnn_port.layout import RNNSpec, unpack

ATOL, RTOL = WHOLE_TOLERANCE  # the whole-model tolerance: |err| <= ATOL + RTOL * |Keras|


@pytest.mark.parametrize("mode", ["rnn_tanh", "rnn_relu"])
def test_plain_rnn_layout_agrees_with_the_cudnn_api_statement(mode):
    spec = RNNSpec(mode, num_layers=2, num_units=5, input_size=3, bidirectional=True)
    H, I, D = 5, 3, 2
    assert spec.param_count == D * H * (I + H + 2) + D * H * (D * H + H + 2)
    buffer = np.arange(spec.param_count, dtype=np.int64)
    canon = unpack(spec, buffer)
    found = matrices_and_biases(mode, 2, H, I, D, 0, buffer)
    for p, params in enumerate(canon.layers):
        assert np.array_equal(found[(p, 0)][0], params.W[0]) and np.array_equal(found[(p, 0)][1], params.b_W[0])
        assert np.array_equal(found[(p, 1)][0], params.R[0]) and np.array_equal(found[(p, 1)][1], params.b_R[0])


@pytest.mark.parametrize("cls_name, act", [("CudnnRNNTanh", np.tanh), ("CudnnRNNRelu", lambda v: np.maximum(v, 0))])
def test_fused_plain_rnn_layer_matches_the_reference_and_its_gradient(cls_name, act):
    import tensorflow as tf

    from cudnn_port import layers

    rng = np.random.default_rng(4)
    B, T, I, H = 3, 6, 4, 5
    layer = getattr(layers, cls_name)(H, num_layers=2, bidirectional=True, return_sequences=True, return_state=True)
    x = rng.normal(size=(B, T, I)).astype("float32")
    lengths = np.array([6, 2, 4])
    mask = np.arange(T)[None, :] < lengths[:, None]
    h0 = rng.normal(size=(B, 4, H)).astype("float32") * 0.5
    layer(x, initial_state=[h0], mask=mask)  # builds
    layer.opaque_kernel.assign(rng.normal(size=layer.spec.param_count).astype("float32") * 0.4)
    y, h = layer(x, initial_state=[h0], mask=mask)
    canon = unpack(layer.spec, layer.opaque_kernel.numpy().astype(np.float64))
    want_y, want_h, _ = reference.forward(canon, x, lengths, np.transpose(h0, (1, 0, 2)))
    np.testing.assert_allclose(np.asarray(y), want_y, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(np.transpose(np.asarray(h), (1, 0, 2)), want_h, atol=1e-5, rtol=1e-4)
    # the reference's step, against the cell's definition written out here: one layer, one direction, one step
    one = unpack(RNNSpec(layer.spec.mode, 1, H, I), rng.normal(size=H * (I + H + 2)))
    p = one.layers[0]
    step = act(p.W[0] @ x[0, 0] + p.b_W[0] + p.R[0] @ h0[0, 0] + p.b_R[0])
    np.testing.assert_allclose(reference.forward(one, x[:1, :1], h_0=h0[:1, :1].transpose(1, 0, 2))[0][0, 0], step,
                               atol=1e-12)

    weights = rng.normal(size=(B, T, 2 * H)).astype("float32")

    def loss(kernel):
        layer.opaque_kernel.assign(kernel)
        out, _ = layer(x, initial_state=[h0], mask=mask, training=True)
        return tf.reduce_sum(out * weights)

    kernel = layer.opaque_kernel.numpy()
    with tf.GradientTape() as tape:
        value = loss(kernel)
    grad = tape.gradient(value, layer.opaque_kernel).numpy()
    direction = rng.normal(size=kernel.shape).astype("float32")
    eps = 1e-3
    numeric = (float(loss(kernel + eps * direction)) - float(loss(kernel - eps * direction))) / (2 * eps)
    assert abs(numeric - float(grad @ direction)) <= 2e-2 * max(1.0, abs(numeric)), (numeric, float(grad @ direction))


@pytest.fixture(scope="module")
def simple_rnn_files(tmp_path_factory):
    """A Sequential SimpleRNN model trained by fit, saved as .keras and .h5; its Keras outputs on a padded batch."""
    import keras

    keras.utils.set_random_seed(5)
    model = keras.Sequential([
        keras.layers.Embedding(30, 6, mask_zero=True, embeddings_initializer=keras.initializers.RandomNormal(stddev=1)),
        keras.layers.SimpleRNN(9, activation="relu", return_sequences=True),
        keras.layers.Dropout(0.2),
        keras.layers.Bidirectional(keras.layers.SimpleRNN(7), merge_mode="sum"),
        keras.layers.Dense(3),
    ])
    folder = tmp_path_factory.mktemp("simple_rnn")
    return (folder, *fit_ids_model_and_save(model, folder, (3,)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model.keras", "model.h5"])
def test_stock_simple_rnn_model_converts_with_fused_nodes_judged_by_keras(simple_rnn_files, name):
    import onnx

    out, stdout = convert_fitted(simple_rnn_files, name)
    assert "SimpleRNN" in stdout and "fused ONNX RNN (Relu)" in stdout, stdout

    ops = [n.op_type for n in onnx.load(str(out / "model.onnx")).graph.node]
    assert ops.count("RNN") == 3 and not {"Loop", "Scan", "LSTM", "GRU"} & set(ops), sorted(set(ops))
    builtin, custom = op_codes(out / "model.tflite")
    assert "UNIDIRECTIONAL_SEQUENCE_RNN" in builtin and not custom and "WHILE" not in builtin, (builtin, custom)

    verified = cli("verify", out, "--json")
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr
    rows = [r for r in json.loads(verified.stdout)["rows"] if str(r.get("stack", "")).startswith("simple_rnn")]
    judges = {r["judge"] for r in rows if r["passed"] and r["artifact"] != "checkpoint (copied variables)"}
    assert judges and all("own Keras weights" in j for j in judges), judges  # not the buffer the rewrite packed


def test_unmasked_bidirectional_simple_rnn_final_states_in_every_runtime(tmp_path):
    """Bidirectional(SimpleRNN) returning only its merged last output and its states, on full-length batches: the
    backward direction's lengths reach LiteRT's REVERSE_SEQUENCE unchanged (they were once read after an op that
    LiteRT computed in their memory)."""
    import keras
    from ai_edge_litert.interpreter import Interpreter

    from cudnn_port import convert

    keras.utils.set_random_seed(14)
    x = keras.Input((None, 3), name="x")
    merged, h_fw, h_bw = keras.layers.Bidirectional(keras.layers.SimpleRNN(5, return_state=True), merge_mode="ave")(x)
    model = keras.Model(x, [merged, h_fw, h_bw])
    model.save(tmp_path / "bi.keras")
    manifest = convert(tmp_path / "bi.keras", tmp_path / "out")
    assert "tflite" in manifest.model_artifacts and manifest.parity["passed"], manifest.warnings
    runner = Interpreter(str(tmp_path / "out" / "model.tflite")).get_signature_runner("serving_default")
    probe = np.random.default_rng(15).normal(size=(3, 7, 3)).astype("float32")
    got = runner(x=probe)
    for k, want in enumerate(model(probe)):
        want = np.asarray(want)
        assert np.all(np.abs(got[f"output_{k}"] - want) <= ATOL + RTOL * np.abs(want)), (k, got[f"output_{k}"], want)


def test_a_saved_model_with_a_plain_rnn_cudnn_node_converts(tmp_path):
    """The graph road: a SavedModel whose function calls CudnnRNNV3(rnn_mode="rnn_relu") (what a GPU export of a
    fused plain-RNN layer holds) becomes CPU ops and an ONNX RNN node, judged by the reference."""
    import onnx
    import tensorflow as tf

    from cudnn_port import convert, verify

    spec = RNNSpec("rnn_relu", 1, 4, 3)
    params = tf.Variable(np.random.default_rng(16).normal(size=spec.param_count).astype("float32") * 0.4)

    class Model(tf.Module):
        def __init__(self):
            self.params = params

        @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float32)])
        def __call__(self, x):
            batch = tf.shape(x)[0]
            y, _, _, _, _ = tf.raw_ops.CudnnRNNV3(
                input=x, input_h=tf.zeros([batch, 1, 4]), input_c=tf.zeros([]), params=self.params,
                sequence_lengths=tf.fill([batch], tf.shape(x)[1]), rnn_mode="rnn_relu", input_mode="linear_input",
                direction="unidirectional", is_training=False, time_major=False)
            return {"y": y}

    module = Model()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures=module.__call__)
    manifest = convert(tmp_path / "sm", tmp_path / "out")
    assert [n.op_type for n in onnx.load(str(tmp_path / "out" / "model.onnx")).graph.node].count("RNN") == 1
    report = verify(tmp_path / "out")
    assert report["passed"] and manifest["nodes"], report["rows"]


@pytest.mark.parametrize("mode", ["rnn_tanh", "rnn_relu"])
def test_reference_plain_rnn_is_pytorchs_nn_rnn(mode):
    """PyTorch's ``nn.RNN(nonlinearity=...)`` (whose GPU path is cuDNN's RNN_TANH / RNN_RELU, same gate-free layout)
    loading the pytorch target's state_dict computes what the reference computes on a ragged batch with states."""
    pytest.importorskip("torch")
    from cudnn_port.formats.pytorch import torch_modules
    from cudnn_port.targets import pytorch as torch_target

    spec = RNNSpec(mode, num_layers=2, num_units=6, input_size=4, bidirectional=True)
    rng = np.random.default_rng(7)
    canon = unpack(spec, rng.normal(size=spec.param_count) * 0.4)
    x, lengths, h0 = rng.normal(size=(3, 5, 4)), np.array([5, 2, 3]), rng.normal(size=(4, 3, 6))
    state_dict = {k.rsplit("/", 1)[-1]: v for k, v in torch_target.write(canon, "").items()}
    got = torch_modules(spec, state_dict, x, lengths, h0.astype("float32"), None)
    want = reference.forward(canon, x, lengths, h0)
    for g, w in zip(got[:2], want[:2]):
        np.testing.assert_allclose(g, w, atol=1e-5, rtol=1e-4)
