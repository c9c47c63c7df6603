"""Stock Keras layers under masks that are not right-padded (left padding, holes, a row with no kept step) compute
exactly what Keras computes, judged by the original stock model's own CPU outputs.

Before this, the ONNX and TFLite models took the count of True steps as a right-padded length (silently wrong) and
the SavedModel stopped at a run-time assertion. Tolerance 1e-5 + 1e-4 relative (``ATOL_FP32``, ``RTOL``): the same
float32 arithmetic in another order, measured ~2e-7 apart. Weights N(0, 1) * 0.3, input width 5 != units, initial
states N(0, 0.5).
"""
import os

import numpy as np
import pytest

from helpers import ATOL_FP32, op_codes

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
pytest.importorskip("onnxruntime")
import cudnn_port  # noqa: E402
from cudnn_port.keras_models.stock_keras import rewrite  # noqa: E402

L = keras.layers
RTOL = 1e-4
FEATURES = 5
MASKS = np.array([[0, 0, 0, 1, 1, 1, 1, 1],   # left-padded
                  [1, 0, 1, 1, 0, 0, 1, 0],   # holes, a masked last step
                  [0, 1, 1, 0, 1, 1, 1, 1],   # masked at the start and in the middle
                  [1, 1, 1, 1, 1, 0, 0, 0],   # right-padded
                  [1, 1, 1, 1, 1, 1, 1, 1],   # full
                  [0, 0, 0, 0, 1, 0, 0, 0],   # one kept step
                  [0, 0, 0, 0, 0, 0, 0, 0]],  # none kept: outputs zeros, states the initial ones
                 dtype=bool)


def seeded(model, seed=3):
    rng = np.random.default_rng(seed)
    model.set_weights([(rng.normal(size=w.shape) * 0.3).astype(w.dtype) for w in model.get_weights()])
    return model


def batch(model, masks=MASKS, seed=7, zero_masked=None):
    """{input name: value}: features N(0, 1), zero exactly at the masked steps (so Masking() gives ``masks``) unless
    the model takes the mask as an input (then the masked steps hold values the layers must skip; ``zero_masked``
    decides where given)."""
    rng = np.random.default_rng(seed)
    names = [t.name.split(":")[0] for t in model.inputs]
    zero_masked = "mask" not in names if zero_masked is None else zero_masked
    x = (rng.normal(size=masks.shape + (FEATURES,)) * (masks[..., None] if zero_masked else 1)).astype("float32")
    feeds = {"x": x, "mask": masks}
    for name, t in zip(names, model.inputs):
        if name not in feeds:
            feeds[name] = (rng.normal(size=(len(masks),) + tuple(t.shape[1:])) * 0.5).astype("float32")
    return {name: feeds[name] for name in names}


def outputs_of(model, feeds):
    inputs = list(feeds.values())
    result = model(inputs if len(inputs) > 1 else inputs[0], training=False)
    return [np.asarray(r) for r in (result if isinstance(result, (list, tuple)) else [result])]


def assert_close(got, want, where):
    assert len(got) == len(want), where
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{where} output {k}: shape {g.shape} vs Keras' {w.shape}"
        err = np.abs(g - w)
        assert np.all(err <= ATOL_FP32 + RTOL * np.abs(w)), f"{where} output {k}: max |error| {err.max():.3g}"


def every_option(kind, masking):
    """Each go_backwards / return_sequences / zero_output_for_mask (default False and True) of one layer, and each
    merge mode of a Bidirectional, with and without return_sequences; all with return_state. The mask: an explicit
    boolean input, with initial states, or Masking() of the features (``masking``), without: Keras passes a layer
    no mask from its input when it is called with ``initial_state``."""
    cls, count = getattr(L, kind), (2 if kind == "LSTM" else 1)
    x = keras.Input((None, FEATURES), name="x")
    mask = keras.Input((None,), dtype="bool", name="mask")
    h = [] if masking else [keras.Input((4,), name=f"s{i}") for i in range(2 * count)]
    seq, kw = (L.Masking()(x), {}) if masking else (x, {"mask": mask, "initial_state": h[:count]})
    outputs = []
    for options in ({}, {"zero_output_for_mask": True}):
        for go_backwards in (False, True):
            for sequences in (False, True):
                outputs += cls(4, go_backwards=go_backwards, return_sequences=sequences, return_state=True,
                               **options)(seq, **kw)
    for merge in ("concat", "sum", "ave", "mul", None):
        for sequences in (False, True):
            outputs += L.Bidirectional(cls(4, return_sequences=sequences, return_state=True), merge_mode=merge)(
                seq, **dict(kw, initial_state=h) if h else kw)
    return seeded(keras.Model([x] + ([] if masking else [mask]) + h, outputs))


@pytest.mark.parametrize("masking", [False, True], ids=["mask-input", "Masking"])
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.slow
def test_rewritten_model_matches_keras_on_any_mask(kind, masking):
    """The rewrite alone (the fused layers on their CPU path): every output and state of every option."""
    model = every_option(kind, masking)
    feeds = batch(model)
    assert_close(outputs_of(rewrite(model), feeds), outputs_of(model, feeds), f"{kind} rewritten")


def test_plain_layer_keeps_keras_default_of_repeating_its_last_output():
    """zero_output_for_mask's default (False) on a plain layer: a masked step repeats the previous output, zeros
    before any kept step; checked against Keras and against those values themselves."""
    x = keras.Input((None, FEATURES), name="x")
    model = seeded(keras.Model(x, L.GRU(3, return_sequences=True)(L.Masking()(x))))
    feeds = batch(model)
    want = outputs_of(model, feeds)[0]
    got = outputs_of(rewrite(model), feeds)[0]
    assert_close([got], [want], "gru")
    assert np.all(got[1, 1] == got[1, 0]) and np.all(got[0, :3] == 0) and np.all(got[6] == 0)


def tagger():
    """Masking -> BiLSTM (concat) -> LSTM(go_backwards) from initial states, with return_state -> BiGRU (sum); the
    last two take the same mask as an explicit input (a layer called with initial_state gets none from Masking)."""
    x, mask = keras.Input((None, FEATURES), name="x"), keras.Input((None,), dtype="bool", name="mask")
    h0, c0 = keras.Input((4,), name="h0"), keras.Input((4,), name="c0")
    seq = L.Bidirectional(L.LSTM(3, return_sequences=True), name="bilstm")(L.Masking()(x))
    back, h, c = L.LSTM(4, go_backwards=True, return_sequences=True, return_state=True, name="back")(
        seq, initial_state=[h0, c0], mask=mask)
    summed = L.Bidirectional(L.GRU(3, return_sequences=True), merge_mode="sum", name="bigru")(back, mask=mask)
    return seeded(keras.Model([x, h0, c0, mask], [L.Dense(2)(summed), h, c], name="holes"))


@pytest.mark.slow
def test_converted_model_matches_keras_on_any_mask_in_every_runtime(tmp_path):
    """One model exported whole: onnxruntime, OpenVINO (f32), LiteRT and the SavedModel against Keras on left-padded
    and holed rows, a row with no kept step among them; its TFLite holds a fused sequence LSTM and no Flex or custom
    op."""
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    from cudnn_port.exports.openvino import compile_onnx

    model = tagger()
    out = tmp_path / "out"
    manifest = cudnn_port.export(model, str(out))
    assert manifest["parity"]["passed"], manifest["parity"]
    run = Interpreter(model_path=str(out / "model.tflite")).get_signature_runner("serving_default")
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    compiled = compile_onnx(str(out / "model.onnx"))
    sig = tf.saved_model.load(os.path.join(out, "saved_model")).signatures["serving_default"]
    names = [f"output_{i}" for i in range(3)]
    for masks in (MASKS, MASKS[1:4, :6]):  # then a smaller batch of shorter rows, in the same sessions
        feeds = batch(model, masks, zero_masked=True)
        want = outputs_of(model, feeds)
        assert_close(session.run(names, feeds), want, f"onnxruntime {masks.shape}")
        result = compiled(feeds)
        assert_close([result[compiled.output(n)] for n in names], want, f"openvino {masks.shape}")
        result = run(**feeds)
        assert_close([result[n] for n in names], want, f"litert {masks.shape}")
        result = sig(**{k: tf.constant(v) for k, v in feeds.items()})
        assert_close([result[n].numpy() for n in names], want, f"saved_model {masks.shape}")
    ops, custom = op_codes(out / "model.tflite")
    assert any(op.endswith("_SEQUENCE_LSTM") for op in ops) and "CUSTOM" not in ops and not custom, (ops, custom)
