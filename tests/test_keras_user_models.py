"""Keras 3 models written and saved the way users write and save them, each judged by Keras' own outputs.

- A first model as Keras' tutorials write it: ``Sequential`` with no ``keras.Input``, ``Dropout``, built and trained
  by ``fit``; exported in the training process, verified in a fresh one; saved as ``.keras`` and ``.h5``, converted
  and verified; its ONNX and TFLite run on a batch of 4 int32 ids of length 7 (not fit's batch of 32 x 20).
- A ``mixed_float16`` (and a ``mixed_bfloat16``) Sequential model with a time length in its
  ``keras.Input((T, F))``, ``Bidirectional``, ``LayerNormalization`` and ``GRU(unroll=True)`` (the same math without
  a loop), saved as ``.h5``: float32 artifacts judged by the model in float32, the distance to the float16 (bfloat16)
  original reported; its ``model.tflite`` written (zero states sized before the model runs).
- A Functional seq2seq (encoder states into the decoder) with ``BatchNormalization`` and ``TimeDistributed(Dense)``
  (Keras loops over the steps where time is dynamic; computed as one Dense over batch x time), its outputs a dict
  (``output_0`` ... its values in sorted key order, each key in the manifest), saved as ``.keras``.
- Recurrent layers inside ``TimeDistributed`` (a char encoder model per word; a Bidirectional LSTM, a GRU v1): folded
  into the batch, one fused stack each.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from helpers import ROOT, cli, compile_eagerly

pytestmark = pytest.mark.slow
# lines of TensorFlow's, absl's, LiteRT's or Python's logging: none may reach stderr from cudnn-port's calls
FOREIGN = re.compile(r"^[IWEF]\d{4} |^(WARNING|INFO|ERROR)[: ]|CudnnRNNV3|Custom ops|See instructions|Warning: ")

def _cli(*argv):
    return subprocess.run([sys.executable, "-m", "cudnn_port.cli", *map(str, argv)], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)


def test_a_first_model_trains_exports_converts_and_runs_on_any_batch(tmp_path):
    """issue 45's first model, end to end (examples/first_model.py as a user runs it): nothing on stderr but
    cudnn-port's own lines; the in-process export verified in a fresh process; .keras and .h5 converted."""
    import keras

    export = tmp_path / "export"
    train = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "first_model.py"), "--out", str(tmp_path),
                            "--export", str(export)], capture_output=True, text=True, cwd=ROOT, timeout=600,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0"))
    assert train.returncode == 0, train.stdout[-2000:] + train.stderr[-3000:]
    foreign = [line for line in train.stderr.splitlines() if "CudnnRNNV3" in line or "custom op" in line]
    assert not foreign, foreign  # the export wrote TFLite without TensorFlow's converter lines reaching stderr
    ids = np.random.default_rng(2).integers(1, 50, size=(4, 7)).astype("int32")
    want = keras.saving.load_model(tmp_path / "model.keras", compile=False).predict(ids, verbose=0)
    verified = _cli("verify", export)  # a fresh process: Keras' counters differ from training's
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr
    for name in ("model.keras", "model.h5"):
        out = tmp_path / f"out_{name.replace('.', '_')}"
        for argv in (("convert", tmp_path / name, out), ("verify", out)):
            done = _cli(*argv)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr
            assert not [line for line in done.stderr.splitlines() if FOREIGN.search(line)], done.stderr
        manifest = json.loads((out / "manifest.json").read_text())
        spec = manifest["model_input_specs"][0]
        assert spec["dtype"] == "int32" and spec["shape"] == [None, None], spec
        _run_onnx_and_tflite(out, spec["name"], ids, want)
    _run_onnx_and_tflite(export, "input_layer", ids, want)


@pytest.mark.parametrize("dtype", ["int64", "float32"])
def test_ids_dtype_makes_every_artifact_take_ids_of_that_dtype(tmp_path, dtype):
    """``--ids-dtype int64`` (NumPy's and most tokenizers' ids) and ``float32`` (as Keras also takes them) on the
    bundled first model: the manifest records the dtype, model.onnx, model.tflite and the SavedModel take ids of it
    (and onnxruntime refuses int32 ids then: the dtype is the artifact's own), each matches Keras on a 4 x 7 batch
    of them, verify's signature feeds are ids in the vocabulary, and verify passes; inspect lists the dtype. A
    source that is not a Keras 3 model is refused in one line by convert and inspect."""
    import keras
    import onnxruntime as ort
    import tensorflow as tf

    from helpers import assert_clean_error

    source = os.path.join(ROOT, "models", "first_model", "model.h5")
    out = tmp_path / "out"
    done = cli("convert", source, out, "--ids-dtype", dtype)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    spec = json.loads((out / "manifest.json").read_text())["model_input_specs"][0]
    assert spec["dtype"] == dtype and spec["shape"] == [None, None], spec
    ids = np.random.default_rng(4).integers(1, 50, size=(4, 7)).astype(dtype)
    want = keras.saving.load_model(source, compile=False).predict(ids, verbose=0)
    assert np.abs(want).max() > 0.05
    _run_onnx_and_tflite(out, spec["name"], ids, want)
    served = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    got = served(**{spec["name"]: tf.constant(ids)})["output_0"].numpy()
    assert np.allclose(got, want, atol=1e-5, rtol=1e-4), np.abs(got - want).max()
    from cudnn_port.judging.signature_feeds import signature_feeds  # what verify's signature rows and bench feed it

    feeds, note = signature_feeds(served, 0)
    drawn = feeds[spec["name"]]
    assert f"token ids {spec['name']} in [1, 50)" in note and drawn.dtype == dtype, (note, drawn.dtype)
    # ids in the vocabulary, the last row right-padded with the padding id 0 (verify exercises the mask)
    valid = drawn[-1] != 0
    assert drawn[:-1].min() >= 1 and drawn.max() < 50 and np.all(drawn == np.round(drawn)), drawn
    assert valid[:2].all() and not valid[2:].any() and drawn[-1, :2].min() >= 1, drawn
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="data type"):
        session.run(None, {spec["name"]: ids.astype("int32" if dtype != "int32" else "int64")})
    verified = cli("verify", out)
    assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr
    if dtype == "int64":
        shown = cli("inspect", source, "--ids-dtype", dtype, "--json")
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["model_inputs"][0]["dtype"] == dtype, shown.stdout
        checkpoint = os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt")
        for argv in (("convert", checkpoint, tmp_path / "o2"), ("inspect", checkpoint)):
            refused = _cli(*argv, "--ids-dtype", dtype)  # a fresh process: its whole stderr is the one line
            assert_clean_error(refused.returncode, refused.stderr, "--ids-dtype applies to a Keras 3 model")
        assert not (tmp_path / "o2").exists()


def test_dict_inputs_shared_masked_embedding_and_eleven_outputs_convert(tmp_path):
    """A Functional model as a multi-task user writes one: dict inputs ({"q", "p"} ids), one Embedding(mask_zero)
    shared by both, Concatenate over time (its mask an op of the graph), Dense, GRU, LSTM and Add, an LSTM, and 11
    Dense heads; trained by fit and saved as .keras. convert passes (the rewrite's clone once collided with an op
    name of the loaded graph, and a dict input was called as a list), every artifact returns the 11 outputs in the
    model's order (output_10 after output_9: ONNX's graph outputs too, by position), and verify passes."""
    import keras
    import onnxruntime as ort

    L = keras.layers
    keras.utils.set_random_seed(11)
    q, p = keras.Input((None,), dtype="int32", name="q"), keras.Input((None,), dtype="int32", name="p")
    embed = L.Embedding(30, 6, mask_zero=True, embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0))
    x = L.Dense(8, activation="tanh")(L.Concatenate(axis=1)([embed(q), embed(p)]))
    x = L.GRU(12, return_sequences=True)(x)
    x = L.LSTM(8)(L.Add()([x, L.LSTM(12, return_sequences=True)(x)]))
    heads = [L.Dense(k + 1, kernel_initializer=keras.initializers.RandomNormal(stddev=2.0), name=f"head{k}")(x)
             for k in range(11)]
    model = keras.Model({"q": q, "p": p}, heads)
    rng = np.random.default_rng(0)
    ids = {name: rng.integers(1, 30, size=(32, 6)) for name in ("q", "p")}
    compile_eagerly(model, "adam", ["mse"] * 11)
    model.fit(ids, [rng.normal(size=(32, k + 1)) for k in range(11)], epochs=1, batch_size=16, verbose=0)
    model.save(tmp_path / "model.keras")
    probe = {name: rng.integers(0, 30, size=(3, 5)).astype("int32") for name in ("q", "p")}
    probe["p"][1, 3:] = 0
    want = [np.asarray(w) for w in model.predict(probe, verbose=0)]
    out = tmp_path / "out"
    done = _cli("convert", tmp_path / "model.keras", out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == [f"output_{k}" for k in range(11)]
    for k, (got, expected) in enumerate(zip(session.run(None, probe), want)):
        assert got.shape == expected.shape and np.allclose(got, expected, atol=1e-5, rtol=1e-4), k
    verified = _cli("verify", out)
    assert verified.returncode == 0, verified.stdout[-3000:] + verified.stderr


def _run_onnx_and_tflite(out, name, ids, want):
    """model.onnx (onnxruntime) and model.tflite (LiteRT) on ``ids`` against Keras' own ``want``."""
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {name: ids})[0]
    assert np.allclose(got, want, atol=1e-5, rtol=1e-4), np.abs(got - want).max()
    runner = Interpreter(str(out / "model.tflite")).get_signature_runner()
    got = runner(**{name: ids})["output_0"]
    assert np.allclose(got, want, atol=1e-5, rtol=1e-4), np.abs(got - want).max()


def _mixed_model(steps, policy="mixed_float16"):
    import keras

    L = keras.layers
    keras.utils.set_random_seed(3)
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        model = keras.Sequential([keras.Input((steps, 5)), L.Bidirectional(L.LSTM(12, return_sequences=True)),
                                  L.LayerNormalization(), L.Dropout(0.1), L.GRU(8, unroll=True),
                                  L.Dense(3, dtype="float32")])
        compile_eagerly(model, "adam", "mse")
        rng = np.random.default_rng(1)
        model.fit(rng.normal(size=(64, steps, 5)), rng.normal(size=(64, 3)), epochs=1, batch_size=16, verbose=0)
    finally:
        keras.config.set_dtype_policy(before)
    return model


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_h5_converts_to_float32_artifacts_judged_in_float32(tmp_path, policy):
    import keras

    from cudnn_port import convert, verify

    model = _mixed_model(9, policy)
    model.save(tmp_path / "mixed.h5")
    assert keras.config.dtype_policy().name == "float32"
    manifest = convert(tmp_path / "mixed.h5", tmp_path / "out")
    assert {"saved_model", "graphdef", "onnx", "tflite"} <= set(manifest.model_artifacts), manifest.warnings
    assert manifest["precision"]["policy"] == policy, manifest.get("precision")
    distance = manifest["precision"]["max_abs_to_original"]
    assert 0 < distance < 0.05, distance  # float16 / bfloat16 rounding: reported, not judged
    # keras.Input((9, 5)) in a Sequential looks like a fit-built length once built; the model runs on any length
    assert manifest["model_input_specs"][0]["shape"] == [None, None, 5], manifest["model_input_specs"]
    report = verify(tmp_path / "out")
    assert report["passed"], [r for r in report["rows"] if r["passed"] is False]
    judged = [r for r in report["rows"] if r["stack"] == "(whole model)" and r["passed"] is not None]
    assert len(judged) >= 4 and all(r["max_abs"] <= 1e-5 + 1e-4 for r in judged), judged
    info = [r for r in report["rows"] if r.get("reported")]
    assert len(info) == 1 and info[0]["max_abs"] > 0 and info[0]["passed"] is None, info

    # the float32 rebuild, the judge, computed independently here: Keras with the float32 policy
    feeds = np.random.default_rng(5).normal(size=(2, 9, 5)).astype("float32")
    twin = keras.Sequential.from_config(json.loads(json.dumps(model.get_config()).replace(f'"{policy}"',
                                                                                          '"float32"')))
    twin.set_weights(model.get_weights())
    import onnxruntime as ort

    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {manifest["model_inputs"][0]: feeds})[0]
    want = twin.predict(feeds, verbose=0)
    assert np.allclose(got, want, atol=1e-5, rtol=1e-4), np.abs(got - want).max()
    assert twin.layers[0].compute_dtype == "float32"


def test_functional_seq2seq_with_states_batch_norm_and_time_distributed(tmp_path):
    import keras

    from cudnn_port import convert, verify

    L = keras.layers
    keras.utils.set_random_seed(4)
    src, tgt = keras.Input((None, 6), name="src"), keras.Input((None, 4), name="tgt")
    _, h, c = L.LSTM(16, return_state=True)(L.BatchNormalization()(src))
    y = L.LSTM(16, return_sequences=True)(tgt, initial_state=[h, c])
    tokens = L.TimeDistributed(L.Dense(4))(L.Dropout(0.2)(y))  # Keras: a per-step loop where time is dynamic
    model = keras.Model([src, tgt], {"tokens": tokens, "summary": L.Dense(2)(h)})  # a dict of outputs
    compile_eagerly(model, "adam", "mse")
    rng = np.random.default_rng(0)
    model.fit([rng.normal(size=(64, 8, 6)), rng.normal(size=(64, 5, 4))],
              {"tokens": rng.normal(size=(64, 5, 4)), "summary": rng.normal(size=(64, 2))}, epochs=1, batch_size=16,
              verbose=0)
    model.save(tmp_path / "seq2seq.keras")
    manifest = convert(tmp_path / "seq2seq.keras", tmp_path / "out")
    assert {"saved_model", "graphdef", "onnx", "tflite"} <= set(manifest.model_artifacts), manifest.warnings
    assert manifest.model_artifacts and not manifest.warnings, manifest.warnings
    assert [(r["name"], r["key"]) for r in manifest["model_output_specs"]] == [("output_0", "summary"),
                                                                                ("output_1", "tokens")]
    import onnxruntime as ort

    feeds = {"src": rng.normal(size=(3, 7, 6)).astype("float32"), "tgt": rng.normal(size=(3, 4, 4)).astype("float32")}
    got = ort.InferenceSession(str(tmp_path / "out" / "model.onnx")).run(None, feeds)
    want = model.predict([feeds["src"], feeds["tgt"]], verbose=0)  # Keras' own dict, by key
    for r, value in zip(manifest["model_output_specs"], got):
        np.testing.assert_allclose(value, want[r["key"]], atol=1e-5, rtol=1e-4, err_msg=r["key"])
    report = verify(tmp_path / "out")
    assert report["passed"], [r for r in report["rows"] if r["passed"] is False]


def test_formats_for_a_whole_model_writes_and_checks_only_what_was_asked(tmp_path, capsys):
    from helpers import assert_clean_error, run_cli

    source = os.path.join(ROOT, "models", "first_model", "model.h5")
    code, out, err = run_cli(capsys, "convert", source, tmp_path / "out", "--formats", "onnx")
    assert code == 0, err
    assert "not written (not in --formats): saved_model, graphdef, tflite" in out, out
    written = sorted(os.listdir(tmp_path / "out"))
    assert written == ["checkpoint", "keras", "layers", "manifest.json", "model.onnx", "model_parity.json"], written
    assert sorted(os.listdir(tmp_path / "out" / "layers" / "lstm__lstm")) == ["model.onnx", "model_stateful.onnx"]
    code, out, err = run_cli(capsys, "verify", tmp_path / "out", "--json")
    report = json.loads(out)
    assert code == 0 and report["passed"], report
    judges = {r["judge"] for r in report["rows"] if r.get("stack") == "(whole model)"}
    assert judges and all(j.endswith("(the source)") for j in judges), judges  # a Keras file judges by itself
    artifacts = {r["artifact"] for r in report["rows"]}
    assert "onnx (onnxruntime)" in artifacts and not any(a.startswith(("saved_model", "tflite", "graphdef"))
                                                         for a in artifacts), artifacts
    code, _, err = run_cli(capsys, "convert", source, tmp_path / "out2", "--formats", "pytorch")
    assert_clean_error(code, err, "--formats pytorch does not apply to a whole Keras model", "onnx, tflite")


def test_a_fit_built_model_that_needs_its_length_keeps_it_with_a_warning(tmp_path):
    """Sequential([LSTM(return_sequences), Flatten, Dense]) built by fit runs only on fit's length: its artifacts
    keep that length (the batch stays dynamic), said in one warning, and match Keras."""
    import keras

    import cudnn_port

    L = keras.layers
    keras.utils.set_random_seed(5)
    model = keras.Sequential([L.LSTM(6, return_sequences=True), L.Flatten(), L.Dense(2)])
    compile_eagerly(model, "adam", "mse")
    rng = np.random.default_rng(0)
    model.fit(rng.normal(size=(64, 10, 3)), rng.normal(size=(64, 2)), batch_size=32, epochs=1, verbose=0)
    manifest = cudnn_port.export(model, tmp_path / "out", formats=["onnx"])
    assert manifest["model_input_specs"][0]["shape"] == [None, 10, 3], manifest["model_input_specs"]
    assert any("does not run on other lengths" in w for w in manifest.warnings), manifest.warnings
    import onnxruntime as ort

    x = rng.normal(size=(4, 10, 3)).astype("float32")
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {manifest["model_inputs"][0]: x})[0]
    want = model.predict(x, verbose=0)
    assert np.allclose(got, want, atol=1e-5, rtol=1e-4), np.abs(got - want).max()


def test_a_model_fit_on_rows_that_do_not_divide_into_batches_takes_any_length(tmp_path):
    """Sequential([Embedding, LSTM, Dense]) fit on 70 rows at batch 32 (Keras records [None, 20]: the last batch is
    6 rows) is built on fit's length 20 but runs on any: its ONNX takes any batch and length of int32 ids, with no
    warning, and matches Keras on a batch of 4 x 7."""
    import keras
    import onnxruntime as ort

    import cudnn_port

    L = keras.layers
    keras.utils.set_random_seed(6)
    model = keras.Sequential([L.Embedding(50, 8), L.LSTM(6), L.Dense(3)])
    model.compile("adam", "mse")  # not eagerly: an eager fit builds on its first batch, [32, 20]
    rng = np.random.default_rng(0)
    model.fit(rng.integers(0, 50, size=(70, 20)), rng.normal(size=(70, 3)), batch_size=32, epochs=1, verbose=0)
    assert list(model.inputs[0].shape) == [None, 20]
    manifest = cudnn_port.export(model, tmp_path / "out", formats=["onnx"])
    assert manifest["model_input_specs"][0]["shape"] == [None, None], manifest["model_input_specs"]
    assert manifest["model_input_specs"][0]["dtype"] == "int32" and not manifest.warnings, manifest.warnings
    ids = rng.integers(1, 50, size=(4, 7)).astype("int32")
    session = ort.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {manifest["model_inputs"][0]: ids})[0]
    want = np.asarray(model(ids))
    assert np.allclose(got, want, atol=1e-5, rtol=1e-4), np.abs(got - want).max()


def test_reshape_dense_repeat_vector_and_time_distributed_around_lstms_keep_model_tflite(tmp_path):
    """Layers Keras computes with shapes read at run time (Reshape, Dense on a sequence, RepeatVector) or with a
    per-step loop (TimeDistributed) before and after LSTMs: every artifact, model.tflite included, judged by Keras."""
    import keras

    from cudnn_port import convert, verify

    L = keras.layers
    keras.utils.set_random_seed(5)
    x = keras.Input((12,), name="flat")
    code = L.LSTM(6)(L.Dense(5)(L.Reshape((4, 3))(x)))  # an autoencoder of 4 steps of 3 features
    y = L.LSTM(4, return_sequences=True)(L.RepeatVector(3)(code))
    y = L.TimeDistributed(L.Dense(2))(L.TimeDistributed(L.BatchNormalization())(y))
    model = keras.Model(x, y)
    compile_eagerly(model, "adam", "mse")
    rng = np.random.default_rng(3)
    model.fit(rng.normal(size=(64, 12)), rng.normal(size=(64, 3, 2)), epochs=1, batch_size=16, verbose=0)
    model.save(tmp_path / "ae.keras")
    manifest = convert(tmp_path / "ae.keras", tmp_path / "out")
    assert {"saved_model", "graphdef", "onnx", "tflite"} <= set(manifest.model_artifacts), manifest.warnings
    assert not manifest.warnings, manifest.warnings
    report = verify(tmp_path / "out")
    assert report["passed"] and "tflite (litert)" in {r["artifact"] for r in report["rows"] if r["passed"]}, \
        [r for r in report["rows"] if r["passed"] is False]


def test_cnn_lstm_of_time_distributed_conv_keeps_model_tflite_on_any_batch(tmp_path):
    """A CNN-LSTM as users write one (TimeDistributed Conv2D, MaxPooling2D, Flatten, then an LSTM), trained by fit:
    its model.tflite is written (the folded steps' reshapes are sized before the model runs) and one LiteRT runner,
    resized to smaller and larger batches and lengths in turn, matches Keras on each."""
    import keras
    from ai_edge_litert.interpreter import Interpreter

    from cudnn_port import convert

    L = keras.layers
    keras.utils.set_random_seed(6)
    model = keras.Sequential([keras.Input((None, 8, 8, 1)), L.TimeDistributed(L.Conv2D(4, 3, activation="relu")),
                              L.TimeDistributed(L.MaxPooling2D()), L.TimeDistributed(L.Flatten()), L.LSTM(6),
                              L.Dense(2)])
    compile_eagerly(model, "adam", "mse")
    rng = np.random.default_rng(4)
    model.fit(rng.normal(size=(32, 5, 8, 8, 1)), rng.normal(size=(32, 2)), epochs=1, batch_size=8, verbose=0)
    model.save(tmp_path / "cnn_lstm.keras")
    manifest = convert(tmp_path / "cnn_lstm.keras", tmp_path / "out")
    assert "tflite" in manifest.model_artifacts and manifest.parity["passed"], manifest.warnings
    assert not [w for w in manifest.warnings if "not written" in w], manifest.warnings
    runner = Interpreter(str(tmp_path / "out" / "model.tflite")).get_signature_runner("serving_default")
    name = next(iter(runner.get_input_details()))
    for batch, steps in ((5, 7), (2, 3), (1, 9), (3, 2)):
        x = rng.normal(size=(batch, steps, 8, 8, 1)).astype("float32")
        want = np.asarray(model(x, training=False))
        got = next(iter(runner(**{name: x}).values()))
        assert np.all(np.abs(got - want) <= 1e-5 + 1e-4 * np.abs(want)), (batch, steps, np.abs(got - want).max())


def test_recurrent_layers_inside_time_distributed_run_as_one_batch_of_sequences(tmp_path):
    """A hierarchical text model as users write one, trained by fit and saved as .keras: a char encoder model (its own
    Embedding(mask_zero), GRU) in TimeDistributed over the words, then an LSTM; beside it TimeDistributed of a
    Bidirectional LSTM (masked chars, merge_mode sum) and of a GRU(reset_after=False). Each folds the words into the
    batch and runs as one fused stack: every artifact and the int8 ONNX judged by Keras, verify judges each stack by
    the stock layer's own weights, and model.tflite takes other batch and word counts (its zero states sized from the
    folded batch, not the model's)."""
    import keras
    from ai_edge_litert.interpreter import Interpreter

    from cudnn_port import convert, verify

    L = keras.layers
    keras.utils.set_random_seed(8)
    rng = np.random.default_rng(8)
    big = keras.initializers.RandomNormal(stddev=1.0)

    def chars(batch, words):  # ragged words of ids, right-padded with 0; an all-padding word too
        ids = rng.integers(1, 30, size=(batch, words, 7)).astype("int32")
        for index in np.ndindex(batch, words):
            ids[index][rng.integers(1, 8):] = 0
        ids[-1, -1] = 0
        return ids

    words = keras.Input((None, 7), dtype="int32", name="chars")
    one = keras.Input((7,), dtype="int32")
    encoder = keras.Model(one, L.GRU(5)(L.Embedding(30, 6, mask_zero=True, embeddings_initializer=big)(one)),
                          name="char_enc")
    topic = L.LSTM(6, name="sentence")(L.Dropout(0.1)(L.TimeDistributed(encoder, name="words")(words)))
    topic = L.Dense(2, kernel_initializer=keras.initializers.RandomNormal(stddev=3.0), name="topic")(topic)
    tags = L.Embedding(30, 4, mask_zero=True, embeddings_initializer=big)(words)
    tags = L.TimeDistributed(L.Bidirectional(L.LSTM(3, return_sequences=True), merge_mode="sum"), name="bi")(tags)
    tags = L.TimeDistributed(L.GRU(4, reset_after=False), name="gru_v1")(tags)
    tags = L.Dense(3, kernel_initializer=keras.initializers.RandomNormal(stddev=3.0), name="tags")(tags)
    model = keras.Model(words, {"topic": topic, "tags": tags})
    compile_eagerly(model, "adam", {"topic": "mse"})  # Keras carries the [batch, words, chars] mask to a loss on "tags"
    model.fit(chars(16, 5), {"topic": rng.normal(size=(16, 2))}, epochs=1, batch_size=8, verbose=0)
    model.save(tmp_path / "words.keras")
    manifest = convert(tmp_path / "words.keras", tmp_path / "out", quantize="int8")
    assert {"saved_model", "graphdef", "onnx", "tflite"} <= set(manifest.model_artifacts), manifest.warnings
    assert manifest.parity["passed"]
    report = verify(tmp_path / "out")
    assert report["passed"], [r for r in report["rows"] if r["passed"] is False]
    judged = {r["stack"] for r in report["rows"] if r["judge"] and "stock layer's own" in r["judge"]}
    assert {s.split("/")[0] for s in judged} == {"words", "bi", "gru_v1", "sentence"}, judged
    assert any(r["artifact"] == "onnx int8 (onnxruntime)" and r["passed"] for r in report["rows"])
    runner = Interpreter(str(tmp_path / "out" / "model.tflite")).get_signature_runner("serving_default")
    order = sorted(("topic", "tags"))  # output_k: the dict's values in sorted key order
    for batch, count in ((2, 6), (5, 1), (1, 3)):
        ids = chars(batch, count)
        want = {k: np.asarray(v) for k, v in model(ids, training=False).items()}
        got = runner(chars=ids)
        for k, key in enumerate(order):
            error = np.abs(got[f"output_{k}"] - want[key])
            assert np.all(error <= 1e-5 + 1e-4 * np.abs(want[key])), (batch, count, key, error.max())


def test_a_mixed_precision_sequential_built_by_fit_takes_float32_inputs():
    """Without keras.Input, fit builds a mixed_float16 Sequential on float16 inputs (the policy's compute dtype):
    the float32 twin every artifact is traced from takes float32, as docs/stock_keras.md says, and so do the specs."""
    import keras

    from cudnn_port.keras_models.model_inputs import input_specs
    from cudnn_port.keras_models.precision import float32_twin

    L = keras.layers
    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = keras.Sequential([L.LSTM(4), L.Dense(1, dtype="float32")])
        compile_eagerly(model, "adam", "mse")
        model.fit(np.zeros((8, 5, 3)), np.zeros((8, 1)), epochs=1, batch_size=4, verbose=0)
    finally:
        keras.config.set_dtype_policy(before)
    assert model.inputs[0].dtype == "float16"  # what Keras recorded
    twin, policy = float32_twin(model)
    assert policy == "mixed_float16" and [s.dtype.name for s in input_specs(twin, print)] == ["float32"]
    x = np.random.default_rng(0).normal(size=(2, 5, 3)).astype("float32")
    np.testing.assert_allclose(twin.predict(x, verbose=0), model.predict(x, verbose=0), atol=2e-2)  # fp16 original
