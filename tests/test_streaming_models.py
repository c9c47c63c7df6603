"""Stateful Keras models (``stateful=True``) convert to streaming models: each stateful layer's initial states are
inputs and its final states outputs of every artifact. Judged here by Keras itself: the stateful model run on two
chunks in a row (its states kept inside its layers), against each artifact run on the same chunks from zero states,
the second call fed the first call's final states; every output and every final state, 1e-5 + 1e-4 relative."""
import numpy as np
import pytest

keras = pytest.importorskip("keras")

from cudnn_port import convert, verify  # noqa: E402

L = keras.layers
TOL = dict(atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    """A Sequential of a stateful LSTM (input 3 != units 5), written as Keras' RNN of an LSTMCell, and a stateful
    GRU, saved as .keras and converted."""
    tmp = tmp_path_factory.mktemp("stateful")
    model = keras.Sequential([keras.Input((None, 3), batch_size=2),
                              L.RNN(L.LSTMCell(5), stateful=True, return_sequences=True, name="enc"),
                              L.GRU(4, stateful=True, return_sequences=True, name="dec"), L.Dense(2)])
    rng = np.random.default_rng(3)
    model.set_weights([(rng.normal(size=w.shape) * 0.4).astype(w.dtype) for w in model.get_weights()])
    model.save(tmp / "stream.keras")
    manifest = convert(tmp / "stream.keras", tmp / "out")
    chunks = [rng.normal(size=(2, 6, 3)).astype("float32"), rng.normal(size=(2, 3, 3)).astype("float32")]
    for layer in model.layers:
        if getattr(layer, "stateful", False):
            layer.reset_states()
    want = []
    for chunk in chunks:  # Keras' own stateful run: outputs, then each layer's states after the chunk
        y = np.asarray(model(chunk))
        states = [np.asarray(s) for name in ("enc", "dec") for s in model.get_layer(name).states]
        want.append([y] + states)
    return manifest, tmp / "out", chunks, want


def _stream(run, chunks, names, x):
    """run(feeds) -> [output_0, states...] over the chunks (fed as ``x``), from zero states, each call fed the last
    call's final states."""
    states = {n: np.zeros((2, w), "float32") for n, w in names.items()}
    got = []
    for chunk in chunks:
        outputs = run(dict(states, **{x: chunk}))
        got.append(outputs)
        states = dict(zip(names, outputs[1:]))
    return got


NAMES = {"enc_h": 5, "enc_c": 5, "dec_h": 4}


def test_manifest_and_interface_say_what_streams(streamed):
    manifest = streamed[0]
    assert manifest["streaming"] == [
        {"layer": "enc", "state_inputs": ["enc_h", "enc_c"], "state_outputs": ["output_1", "output_2"]},
        {"layer": "dec", "state_inputs": ["dec_h"], "state_outputs": ["output_3"]}]
    specs = {s["name"]: s["shape"] for s in manifest["model_input_specs"]}
    x = manifest["model_inputs"][0]  # the input layer's name, as Keras numbered it in the saving process
    assert specs == {x: [None, None, 3], "enc_h": [None, 5], "enc_c": [None, 5], "dec_h": [None, 4]}
    assert {"saved_model", "onnx", "tflite"} <= set(manifest.model_artifacts), manifest.warnings


def test_each_artifact_streams_like_the_stateful_keras_model(streamed):
    import onnxruntime as ort
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    manifest, out, chunks, want = streamed
    onnx = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    outs = [f"output_{k}" for k in range(4)]
    serving = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    lite = Interpreter(str(out / "model.tflite")).get_signature_runner("serving_default")
    runs = {"onnx": lambda f: onnx.run(outs, f),
            "saved_model": lambda f: [np.asarray(serving(**{k: tf.constant(v) for k, v in f.items()})[o])
                                      for o in outs],
            "tflite": lambda f: [lite(**f)[o] for o in outs]}
    for name, run in runs.items():
        for got, expected in zip(_stream(run, chunks, NAMES, manifest["model_inputs"][0]), want):
            for g, w in zip(got, expected):
                np.testing.assert_allclose(g, w, **TOL, err_msg=name)


def test_verify_passes_and_judges_every_artifact(streamed):
    report = verify(streamed[1])
    assert report["passed"], [r for r in report["rows"] if r["passed"] is False]
    judged = {r["artifact"] for r in report["rows"] if r["stack"] == "(whole model)" and r["passed"]}
    assert {"saved_model", "graphdef", "onnx (onnxruntime)", "tflite (litert)"} <= judged, judged


def test_a_functional_model_with_a_masked_stateful_layer_streams_like_keras(tmp_path):
    """A Functional model of one input, Embedding(mask_zero) -> stateful LSTM: the mask reaches the stateless twin
    (Keras passes an input's mask only to a call of one tensor, and the twin is called with initial_state too), so
    model.onnx from zero states matches Keras' stateful model on a right-padded chunk, and on the next chunk fed the
    first one's final states."""
    import onnxruntime as ort

    from cudnn_port import export

    ids = keras.Input(batch_shape=(2, None), dtype="int32", name="ids")
    model = keras.Model(ids, L.Dense(2)(L.LSTM(4, stateful=True, return_sequences=True, name="lm")(
        L.Embedding(10, 3, mask_zero=True)(ids))))
    rng = np.random.default_rng(5)
    model.set_weights([(rng.normal(size=w.shape) * 0.5).astype(w.dtype) for w in model.get_weights()])
    manifest = export(model, tmp_path / "out", formats=["onnx"])
    chunks = [np.array([[3, 4, 5, 0, 0], [1, 2, 3, 4, 5]], np.int32), np.array([[6, 7, 0], [8, 9, 1]], np.int32)]
    model.get_layer("lm").reset_states()
    want = [np.asarray(model(chunk)) for chunk in chunks]
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    states = {"lm_h": np.zeros((2, 4), "float32"), "lm_c": np.zeros((2, 4), "float32")}
    assert manifest["streaming"][0]["state_inputs"] == ["lm_h", "lm_c"]
    for chunk, expected in zip(chunks, want):
        y, h, c = session.run(["output_0", "output_1", "output_2"], dict(states, ids=chunk))
        np.testing.assert_allclose(y, expected, **TOL)
        states = {"lm_h": h, "lm_c": c}


@pytest.mark.slow
def test_a_fixed_batch_stateful_model_tflite_prepares_at_its_own_batch(tmp_path):
    """Input(batch_shape=(3, 4, 5)) -> stateful, unrolled LSTM -> stateful GRU -> Dense -> Dense, saved with
    model.save: LiteRT prepares model.tflite at the model's own batch when a caller resizes only the sequence input
    (the state inputs start at that batch too; they started at 1 row, and LiteRT refused the fused LSTM:
    ``NumElements(output_state) != n_batch * n_output``); so does the LSTM's own layers/enc__enc/model_stateful.tflite.
    Judged by Keras' stateful model over two chunks, the second call fed the first call's final states."""
    from ai_edge_litert.interpreter import Interpreter

    from cudnn_port import convert

    model = keras.Sequential([keras.Input(batch_shape=(3, 4, 5), name="x"),
                              L.LSTM(6, stateful=True, unroll=True, return_sequences=True, name="enc"),
                              L.GRU(4, stateful=True, unroll=True, name="dec"), L.Dense(7, activation="relu"),
                              L.Dense(2)])
    rng = np.random.default_rng(11)
    model.set_weights([(rng.normal(size=w.shape) * 0.4).astype(w.dtype) for w in model.get_weights()])
    model.save(tmp_path / "fixed.keras")
    convert(tmp_path / "fixed.keras", tmp_path / "out", formats=["tflite"])
    chunks = [rng.normal(size=(3, 4, 5)).astype("float32") for _ in range(2)]
    for name in ("enc", "dec"):
        model.get_layer(name).reset_states()
    want = []
    for chunk in chunks:
        y = np.asarray(model(chunk))
        want.append([y] + [np.asarray(s) for name in ("enc", "dec") for s in model.get_layer(name).states])
    interpreter = Interpreter(str(tmp_path / "out" / "model.tflite"))
    inputs = {d["name"]: d["index"] for d in interpreter.get_input_details()}
    outputs = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    interpreter.resize_tensor_input(inputs["x"], [3, 4, 5])  # the sequence input alone, as a caller of batch 3 does
    interpreter.allocate_tensors()
    states = {"enc_h": np.zeros((3, 6), "float32"), "enc_c": np.zeros((3, 6), "float32"),
              "dec_h": np.zeros((3, 4), "float32")}
    for chunk, expected in zip(chunks, want):
        for name, value in dict(states, x=chunk).items():
            interpreter.set_tensor(inputs[name], value)
        interpreter.invoke()
        got = [interpreter.get_tensor(outputs[f"output_{k}"]) for k in range(4)]
        for g, w in zip(got, expected):
            np.testing.assert_allclose(g, w, **TOL)
        states = dict(zip(("enc_h", "enc_c", "dec_h"), got[1:]))
    # the LSTM's own streaming file, resized at its sequence inputs alone: its states start at batch 3 too
    layer = Interpreter(str(tmp_path / "out" / "layers" / "enc__enc" / "model_stateful.tflite"))
    inputs = {d["name"]: d["index"] for d in layer.get_input_details()}
    outputs = {d["name"]: d["index"] for d in layer.get_output_details()}
    layer.resize_tensor_input(inputs["inputs"], [3, 4, 5])
    layer.resize_tensor_input(inputs["sequence_lengths"], [3])
    layer.allocate_tensors()
    feeds = {"inputs": chunks[0], "sequence_lengths": np.full(3, 4, np.int32),
             "initial_h": np.zeros((1, 3, 6), "float32"), "initial_c": np.zeros((1, 3, 6), "float32")}
    for name, value in feeds.items():
        layer.set_tensor(inputs[name], value)
    layer.invoke()
    np.testing.assert_allclose(layer.get_tensor(outputs["final_h"])[0], want[0][1], **TOL)  # Keras' enc h
    np.testing.assert_allclose(layer.get_tensor(outputs["final_c"])[0], want[0][2], **TOL)
