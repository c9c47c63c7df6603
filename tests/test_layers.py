"""cudnn_port.layers on CPU: outputs and gradients against the NumPy reference, training, saving, converting.

The GPU path (one CudnnRNNV3 call) is checked against the CPU path by the ``gpu`` test at the end, which skips
without a GPU visible to TensorFlow.
"""
import numpy as np
import pytest

from helpers import ATOL_FP32, CONFIGS, CONFIG_IDS, assert_clean_error, make_spec, ragged_batch, random_blob, \
    reference_outputs, run_cli, tagger
from cudnn_port import reference
from cudnn_port.layout import unpack

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
from cudnn_port.layers import CudnnGRU, CudnnLSTM  # noqa: E402

LAYERS = {"lstm": CudnnLSTM, "gru": CudnnGRU}


def make_layer(spec, blob, **kwargs):
    layer = LAYERS[spec.mode](spec.num_units, num_layers=spec.num_layers, bidirectional=spec.bidirectional, **kwargs)
    layer.build((None, None, spec.input_size))
    layer.opaque_kernel.assign(blob)
    return layer


def batch_major(states):
    return np.transpose(states, (1, 0, 2))


@pytest.mark.parametrize("mode,layers,bi", CONFIGS, ids=CONFIG_IDS)
def test_layer_matches_reference_with_mask_and_initial_state(mode, layers, bi):
    spec = make_spec(mode, layers, bi)
    blob = random_blob(spec, seed=50 + layers)
    x, lengths, h_0, c_0 = ragged_batch(spec)
    layer = make_layer(spec, blob, return_sequences=True, return_state=True)
    mask = np.arange(x.shape[1])[None, :] < lengths[:, None]
    initial = [batch_major(h_0)] + ([batch_major(c_0)] if mode == "lstm" else [])
    got = [np.asarray(t) for t in layer(x, initial_state=initial, mask=mask)]
    want = reference.forward(unpack(spec, blob), x, lengths, h_0, c_0)
    assert np.max(np.abs(got[0] - want[0])) <= ATOL_FP32  # zeros past each length, as cuDNN
    assert np.max(np.abs(got[1] - batch_major(want[1]))) <= ATOL_FP32
    if mode == "lstm":
        assert np.max(np.abs(got[2] - batch_major(want[2]))) <= ATOL_FP32


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_last_output_is_the_top_layers_final_states(mode):
    spec = make_spec(mode, 2, True)
    blob = random_blob(spec, seed=60)
    x, lengths, _, _ = ragged_batch(spec)
    mask = np.arange(x.shape[1])[None, :] < lengths[:, None]
    got = np.asarray(make_layer(spec, blob)(x, mask=mask))
    _, h_n, _ = reference.forward(unpack(spec, blob), x, lengths)
    want = np.concatenate([h_n[2], h_n[3]], axis=-1)  # layer 1: forward final, backward final
    assert got.shape == (4, 2 * spec.num_units) and np.max(np.abs(got - want)) <= ATOL_FP32


def test_mask_that_is_not_right_padded_is_refused():
    spec = make_spec("lstm", 1, False)
    layer = make_layer(spec, random_blob(spec))
    x = np.ones((2, 4, spec.input_size), "float32")
    mask = np.array([[True, False, True, True], [True, True, True, True]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="right-padded masks only"):
        layer(x, mask=mask)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_gradient_matches_finite_differences_of_the_reference(mode):
    """d loss / d buffer from TensorFlow (CPU path) vs central differences of the float64 NumPy reference."""
    spec = make_spec(mode, 2, True, input_size=3, hidden=2)
    blob = random_blob(spec, seed=61)
    x, lengths, _, _ = ragged_batch(spec, batch=3, steps=4)
    weights = np.random.default_rng(62).normal(size=(3, 4, 2 * spec.num_units))
    mask = np.arange(4)[None, :] < lengths[:, None]
    layer = make_layer(spec, blob, return_sequences=True)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(x, mask=mask) * weights)
    grad = tape.gradient(loss, layer.opaque_kernel).numpy()

    def ref_loss(b):
        return float(np.sum(reference.forward(unpack(spec, b), x.astype(np.float64), lengths)[0] * weights))

    eps, base = 1e-6, blob.astype(np.float64)
    for i in np.random.default_rng(63).choice(spec.param_count, size=40, replace=False):
        up, down = base.copy(), base.copy()
        up[i] += eps
        down[i] -= eps
        numeric = (ref_loss(up) - ref_loss(down)) / (2 * eps)
        assert abs(grad[i] - numeric) <= 1e-4 + 1e-3 * abs(numeric), (i, grad[i], numeric)


def tiny_model(layer_cls=CudnnLSTM, **kwargs):
    inputs = keras.Input((None, 4))
    x = layer_cls(6, num_layers=2, bidirectional=True, return_sequences=True, seed=1, **kwargs)(inputs)
    return keras.Model(inputs, keras.layers.Dense(1)(x))


def tiny_data():
    rng = np.random.default_rng(70)
    x = rng.normal(size=(32, 5, 4)).astype("float32")
    y = np.cumsum(x[..., :1], axis=1).astype("float32")  # a running sum: learnable by an RNN
    return x, y


@pytest.mark.slow
@pytest.mark.parametrize("layer_cls", [CudnnLSTM, CudnnGRU])
def test_fit_reduces_the_loss(layer_cls):
    keras.utils.set_random_seed(0)
    model = tiny_model(layer_cls, dropout=0.1)
    model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")
    x, y = tiny_data()
    history = model.fit(x, y, epochs=15, batch_size=8, verbose=0).history["loss"]
    assert history[-1] < 0.5 * history[0], history


def test_custom_training_step_under_tf_function():
    keras.utils.set_random_seed(0)
    model = tiny_model()
    optimizer = keras.optimizers.SGD(0.05)
    x, y = tiny_data()

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = [float(step(x, y)) for _ in range(20)]
    assert losses[-1] < losses[0]
    assert len(model.layers[1].trainable_weights) == 1  # one buffer per fused layer


@pytest.mark.slow
def test_save_and_load_round_trip(tmp_path):
    model = tiny_model(CudnnGRU)
    x, _ = tiny_data()
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(loaded.layers[1], CudnnGRU)
    assert loaded.layers[1].get_config() == model.layers[1].get_config()
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_dropout_only_while_training():
    spec = make_spec("lstm", 2, False)
    layer = make_layer(spec, random_blob(spec), dropout=0.5, return_sequences=True, seed=3)
    x = np.random.default_rng(0).normal(size=(2, 4, spec.input_size)).astype("float32")
    want, _, _ = reference.forward(unpack(spec, random_blob(spec)), x)
    assert np.max(np.abs(np.asarray(layer(x, training=False)) - want)) <= ATOL_FP32
    assert np.max(np.abs(np.asarray(layer(x, training=True)) - want)) > 1e-3


@pytest.mark.slow
def test_checkpoint_of_the_layer_converts_without_flags(tmp_path):
    from cudnn_port import convert
    from cudnn_port.verify import verify

    model = tiny_model()
    tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt" / "model"))
    manifest = convert(tmp_path / "ckpt" / "model", tmp_path / "out")
    stack = manifest["stacks"][0]
    assert stack["spec"] == make_spec("lstm", 2, True, input_size=4, hidden=6).to_dict()
    assert "cudnn_port.layers" in stack["spec_source"]
    assert verify(tmp_path / "out")["passed"]


@pytest.mark.gpu
@pytest.mark.parametrize("mode,layers,bi,proj", [c + (0,) for c in CONFIGS] + [("lstm", 2, True, 3)],
                         ids=CONFIG_IDS + ["lstm-L2-bi-proj3"])
def test_gpu_fused_op_matches_cpu_path(mode, layers, bi, proj):
    """On a GPU the layer is one CudnnRNNV3 call; with TF32 off (TensorFlow allows it by default on Ampere and
    newer, where it moves outputs by up to ~3e-3) it must match the reference within 1e-5 on these small sizes."""
    if not tf.config.list_logical_devices("GPU"):
        pytest.skip("TensorFlow sees no GPU")
    spec = make_spec(mode, layers, bi)
    spec = type(spec)(**{**spec.to_dict(), "num_proj": proj})
    blob = random_blob(spec, seed=80)
    x, lengths, _, _ = ragged_batch(spec)
    mask = np.arange(x.shape[1])[None, :] < lengths[:, None]
    layer = make_layer(spec, blob, return_sequences=True, num_proj=proj)
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        with tf.device("/GPU:0"):
            got = np.asarray(layer(x, mask=mask))
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
    want, _, _ = reference.forward(unpack(spec, blob), x, lengths)
    assert np.max(np.abs(got - want)) <= 1e-5


def token_batch():
    ids = np.random.default_rng(90).integers(1, 20, size=(4, 8)).astype("int32")
    for row, length in enumerate([8, 1, 5, 3]):
        ids[row, length:] = 0  # right-padded; mask_zero turns the padding into sequence lengths
    return ids


@pytest.mark.slow
def test_export_whole_model_to_cpu_artifacts(tmp_path, tagger_out):
    """cudnn_port.export(tagger()) (the session's tagger_out), its artifacts run as users run them."""
    import shutil

    import onnx
    import onnxruntime as ort

    from cudnn_port.verify import verify

    model, manifest = tagger(), tagger_out[1]
    shutil.copytree(tagger_out[0], tmp_path / "out")  # verify below writes parity.json into it
    assert manifest["parity"]["passed"], manifest["parity"]
    assert sorted(manifest["model_artifacts"]) == ["graphdef", "keras", "onnx", "saved_model", "tflite"]
    assert sorted(s["variable"] for s in manifest["stacks"]) == ["decoder/opaque_kernel", "encoder/opaque_kernel"]
    assert "embed/embeddings" in manifest["copied"] and "head/kernel" in manifest["copied"]
    ids = token_batch()
    want = reference_outputs(model, [ids])[0]  # the NumPy reference, not the path the SavedModel was traced from
    loaded = tf.saved_model.load(str(tmp_path / "out" / "saved_model"))
    got = loaded.signatures["serving_default"](tokens=ids)["output_0"].numpy()
    assert np.max(np.abs(got - want)) <= ATOL_FP32
    from cudnn_port.graphs import load_proto

    ops = {n.op for meta in load_proto(str(tmp_path / "out" / "saved_model")).meta_graphs
           for f in list(meta.graph_def.library.function) for n in f.node_def}
    assert ops and not any(op.startswith("Cudnn") for op in ops)
    kinds = {n.op_type for n in onnx.load(str(tmp_path / "out" / "model.onnx")).graph.node}
    assert {"LSTM", "GRU"} <= kinds and not {"Loop", "Scan"} & kinds
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    assert np.max(np.abs(session.run(["output_0"], {"tokens": ids})[0] - want)) <= ATOL_FP32
    assert verify(tmp_path / "out")["passed"]


@pytest.mark.slow
def test_cli_converts_a_saved_keras_file(tmp_path, capsys, tagger_out):
    """One CLI conversion of the saved tagger, with --style tf1 (the default style, keras, is the session's export
    of the same model: tagger_out)."""
    import json

    assert tagger_out[1]["style"] == "keras"
    tagger().save(tmp_path / "tagger.keras")
    code, out, err = run_cli(capsys, "convert", tmp_path / "tagger.keras", tmp_path / "out_tf1", "--style", "tf1",
                             "--json")
    assert code == 0, err
    manifest = json.loads(out)
    assert manifest["kind"] == "keras_model" and manifest["parity"]["passed"]
    assert manifest["style"] == "tf1"  # --style reaches the checkpoint's names
    code, _, err = run_cli(capsys, "convert", tmp_path / "tagger.keras", tmp_path / "out3", "--formats", "keras")
    assert_clean_error(code, err, "--formats keras does not apply to a whole Keras model")
    (tmp_path / "broken.keras").write_bytes(b"PK\x03\x04 not really a zip")
    code, _, err = run_cli(capsys, "convert", tmp_path / "broken.keras", tmp_path / "out2")
    assert_clean_error(code, err, "not a zip archive", "complete .keras file")
    assert not (tmp_path / "out2").exists()


def run_distributed(kind, env=None):
    """Start tests/distributed_fit.py (its own process: devices and clusters are fixed at TF start-up)."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    return subprocess.Popen([sys.executable, os.path.join(here, "distributed_fit.py"), kind], cwd=here,
                            env=dict(os.environ, **(env or {})), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def result_of(process):
    import json

    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def mirrored():
    """One MirroredStrategy fit over two CPU devices (a process of its own), read by both distributed tests."""
    return result_of(run_distributed("mirrored"))


@pytest.mark.slow
def test_mirrored_strategy_over_two_cpu_devices(mirrored):
    result = mirrored
    assert result["replicas"] == 2 and result["buffers"] == 2
    assert result["copies"] == [2, 2] and result["copies_agree"]  # one buffer per layer, mirrored on each device
    assert result["loss"][-1] < 0.5 * result["loss"][0]


@pytest.mark.slow
def test_multi_worker_mirrored_strategy_with_two_local_workers(mirrored):
    import json
    import socket

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("localhost", 0))
            ports.append(s.getsockname()[1])
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    workers = [run_distributed("worker", {"TF_CONFIG": json.dumps({"cluster": cluster,
                                                                    "task": {"type": "worker", "index": i}})})
               for i in range(2)]
    results = [result_of(w) for w in workers]
    assert all(r["replicas"] == 2 for r in results)
    assert results[0]["digest"] == results[1]["digest"]  # synchronous training: both end with the same buffers
    assert results[0]["loss"][-1] < 0.5 * results[0]["loss"][0]
    # the same global batches on one machine's two devices: the same math
    np.testing.assert_allclose(results[0]["loss"], mirrored["loss"], rtol=1e-4)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_gpu_path_is_one_fused_op_and_has_a_gradient(mode):
    """Traced (not run: no GPU here) with the cuDNN path, the whole 3-layer bidirectional stack is ONE
    CudnnRNNV3 node with the layer's settings, and its gradient is cuDNN's backward op."""
    from cudnn_port.layer_paths import forced_path

    spec = make_spec(mode, 3, True)
    layer = make_layer(spec, random_blob(spec), return_sequences=True, dropout=0.25)

    @tf.function
    def step(x, mask):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x, mask=mask, training=True))
        return tape.gradient(loss, layer.opaque_kernel.value)

    with forced_path("cudnn"):
        graph = step.get_concrete_function(tf.TensorSpec([None, None, spec.input_size]),
                                           tf.TensorSpec([None, None], tf.bool)).graph
    nodes = [op for op in graph.get_operations() if op.type.startswith("Cudnn")]
    forward = [op for op in nodes if op.type == "CudnnRNNV3"]
    assert len(forward) == 1 and {op.type for op in nodes} == {"CudnnRNNV3", "CudnnRNNBackpropV3"}
    op = forward[0]
    assert op.get_attr("rnn_mode").decode() == mode and op.get_attr("direction") == b"bidirectional"
    assert op.get_attr("time_major") is False and abs(op.get_attr("dropout") - 0.25) < 1e-7
    assert op.get_attr("is_training") is True and op.inputs[3].shape.as_list() == [spec.param_count]


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_initial_buffer_follows_keras_defaults(mode):
    """Per layer and direction: glorot-uniform input kernel [I_l, G*H], orthogonal recurrent kernel [H, G*H]
    (orthonormal rows), zero biases except 1 on the LSTM forget gate's b_W (b_W + b_R = Keras' unit forget bias)."""
    layer = LAYERS[mode](6, num_layers=2, bidirectional=True, seed=4)
    layer.build((None, None, 5))
    spec = layer.spec
    G, H = spec.num_gates, spec.num_units
    canon = unpack(spec, layer.opaque_kernel.numpy())
    for layer_index, _, p in canon.pseudo_layers():
        width = spec.layer_input_size(layer_index)
        kernel = np.transpose(p.W, (2, 0, 1)).reshape(width, G * H)  # back to Keras' [I_l, G*H]
        recurrent = np.transpose(p.R, (2, 0, 1)).reshape(H, G * H)
        limit = np.sqrt(6.0 / (width + G * H))
        assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.5 * limit
        np.testing.assert_allclose(recurrent @ recurrent.T, np.eye(H), atol=1e-5)
        want_b_W = np.zeros((G, H))
        if mode == "lstm":
            want_b_W[1] = 1.0  # cuDNN gate order i, f, c, o
        np.testing.assert_array_equal(p.b_W, want_b_W)
        np.testing.assert_array_equal(p.b_R, np.zeros((G, H)))
    assert layer.cudnn_spec.numpy().tolist() == [0 if mode == "lstm" else 1, 2, 6, 5, 2]


def test_model_without_fused_layers_says_so(tmp_path, capsys):
    inputs = keras.Input((3,))
    keras.Model(inputs, keras.layers.Dense(2)(inputs)).save(tmp_path / "plain.keras")
    code, _, err = run_cli(capsys, "convert", tmp_path / "plain.keras", tmp_path / "out")
    assert_clean_error(code, err, "holds no layer whose math cuDNN computes")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("layer_cls,states", [(CudnnLSTM, 2), (CudnnGRU, 1)])
def test_return_state_in_a_functional_model(layer_cls, states):
    """Outputs and masks line up with [output, h(, c)] for both layers, masked or not."""
    tokens = keras.Input((None,), dtype="int32")
    x = keras.layers.Embedding(9, 4, mask_zero=True)(tokens)
    layer = layer_cls(3, num_layers=2, return_sequences=True, return_state=True)
    result = layer(x)
    assert len(result) == 1 + states
    for mask in (None, np.ones((2, 3), bool)):  # one mask per output: the sequence's, then None per state
        masks = layer.compute_mask(np.zeros((2, 3, 4), "float32"), mask)
        assert len(masks) == 1 + states and all(m is None for m in masks[1:])
    model = keras.Model(tokens, result)
    rng = np.random.default_rng(4)
    for weight in model.weights:
        if weight.dtype == "float32":
            weight.assign((rng.normal(size=weight.shape) * 0.5).astype("float32"))
    ids = np.array([[1, 2, 0], [3, 0, 0]], np.int32)
    got = model(ids)
    assert [tuple(t.shape) for t in got] == [(2, 3, 3)] + [(2, 2, 3)] * states
    # values, not only shapes: the sequence, then h (and c) as [batch, layer, units], against the NumPy reference on
    # the embedded ids with lengths 2 and 1 (a swapped h and c, or a state of the wrong step, fails here)
    x = np.asarray(model.layers[1](ids), np.float64)
    y, h, c = reference.forward(unpack(layer.spec, layer.opaque_kernel.numpy()), x, np.array([2, 1]))
    want = [y] + [np.transpose(s, (1, 0, 2)) for s in (h, c)[:states]]
    for g, w, name in zip(got, want, ("outputs", "h", "c")):
        np.testing.assert_allclose(np.asarray(g), w, atol=1e-5, rtol=1e-4, err_msg=name)
