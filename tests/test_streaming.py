"""Streaming: model_stateful.onnx (and the SavedModel's with_initial_state) called chunk after chunk, the final
states of one chunk fed as the initial states of the next, equal one call on the whole sequence and the float64
reference, for chunks of 1, 3, 16 steps and the whole. Unidirectional stacks only: a bidirectional stack's backward
direction starts at each sequence's last step, so chunking it changes its outputs (checked below).

Tolerance: ATOL_FP32 (1e-5), the fp32 bound every artifact meets against the float64 reference (measured ~2e-7)."""
import json
import os

import numpy as np
import pytest

from helpers import ATOL_FP32, ROOT, make_spec, random_canon
from cudnn_port import reference
from cudnn_port.exports.onnx import write_onnx

ort = pytest.importorskip("onnxruntime")
STEPS, BATCH, CHUNKS = 20, 3, (1, 3, 16, 20)
STACKS = [("lstm", 2), ("gru", 3)]


def onnx_run(path):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    def run(x, states):
        out = dict(zip(names, session.run(None, dict(inputs=x, sequence_lengths=np.full(len(x), x.shape[1], np.int32),
                                                      **states))))
        return out["outputs"], {k: out[k.replace("initial", "final")] for k in states}

    return run


def chunked(run, x, chunk, states):
    """Call ``run(x_chunk, states) -> (y, states)`` ``chunk`` steps at a time, carrying the states."""
    ys = []
    for start in range(0, x.shape[1], chunk):
        y, states = run(x[:, start:start + chunk], states)
        ys.append(y)
    return np.concatenate(ys, axis=1), states


def batch(spec, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(BATCH, STEPS, spec.input_size)).astype(np.float32)
    shape = (spec.num_pseudo_layers, BATCH, spec.num_units)
    states = {"initial_h": (rng.normal(size=shape) * 0.5).astype(np.float32)}
    if spec.mode == "lstm":
        states["initial_c"] = (rng.normal(size=shape) * 0.5).astype(np.float32)
    return x, states


def assert_stream_equals_whole(run, canon, x, states, what):
    want = reference.forward(canon, x, None, states["initial_h"], states.get("initial_c"))
    whole, whole_states = run(x, states)
    for chunk in CHUNKS:
        y, finals = chunked(run, x, chunk, states)
        np.testing.assert_allclose(y, whole, atol=ATOL_FP32, err_msg=f"{what}: chunks of {chunk} vs one call")
        np.testing.assert_allclose(y, want[0], atol=ATOL_FP32, err_msg=f"{what}: chunks of {chunk} vs reference")
        for name, w in zip(("initial_h", "initial_c"), want[1:]):
            if name in finals:
                np.testing.assert_allclose(finals[name], whole_states[name], atol=ATOL_FP32)
                np.testing.assert_allclose(finals[name], w, atol=ATOL_FP32, err_msg=f"{what}: final {name[8:]}")


@pytest.mark.parametrize("mode,layers", STACKS)
def test_chunks_of_any_size_equal_one_call_in_onnxruntime(tmp_path, mode, layers):
    canon = random_canon(make_spec(mode, layers, False, input_size=7, hidden=5), seed=layers)
    write_onnx(canon, tmp_path / "model_stateful.onnx", states=True)
    x, states = batch(canon.spec)
    assert_stream_equals_whole(onnx_run(tmp_path / "model_stateful.onnx"), canon, x, states, f"{mode} onnx")


@pytest.mark.parametrize("mode,layers", STACKS)
def test_chunks_equal_one_call_in_openvino(tmp_path, mode, layers):
    pytest.importorskip("openvino", reason="OpenVINO is not installed (pip install 'cudnn-port[openvino]')")
    from cudnn_port.exports.openvino import open_onnx

    canon = random_canon(make_spec(mode, layers, False, input_size=7, hidden=5), seed=layers)
    write_onnx(canon, tmp_path / "model_stateful.onnx", states=True)
    run_ov = open_onnx(tmp_path / "model_stateful.onnx", canon.spec)

    def run(x, states):
        y, h, c = run_ov(dict(inputs=x, sequence_lengths=np.full(len(x), x.shape[1], np.int32), **states))
        return y, {k: v for k, v in (("initial_h", h), ("initial_c", c)) if k in states}

    x, states = batch(canon.spec)
    assert_stream_equals_whole(run, canon, x, states, f"{mode} openvino")


def test_chunks_equal_one_call_in_the_saved_model(tmp_path):
    tf = pytest.importorskip("tensorflow")
    from cudnn_port.exports.tensorflow import write_saved_model

    canon = random_canon(make_spec("lstm", 2, False, input_size=7, hidden=5), seed=5)
    write_saved_model(canon, str(tmp_path / "saved_model"))
    fn = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["with_initial_state"]

    def run(x, states):
        out = fn(inputs=tf.constant(x), sequence_lengths=tf.fill([len(x)], x.shape[1]),
                 **{k: tf.constant(v) for k, v in states.items()})
        return out["outputs"].numpy(), {k: out[k.replace("initial", "final")].numpy() for k in states}

    x, states = batch(canon.spec)
    assert_stream_equals_whole(run, canon, x, states, "saved_model")


def test_metadata_names_the_states_and_a_bidirectional_stack_does_not_stream(tmp_path):
    import onnx

    canon = random_canon(make_spec("lstm", 2, True, input_size=7, hidden=5))
    write_onnx(canon, tmp_path / "model_stateful.onnx", states=True)
    meta = {p.key: p.value for p in onnx.load(str(tmp_path / "model_stateful.onnx")).metadata_props}
    assert meta["state_inputs"] == "initial_h,initial_c" and meta["state_outputs"] == "final_h,final_c"
    assert meta["state_shape"] == "4,batch,5" and meta["streaming"] == "0" and "chunk" in meta
    x, states = batch(canon.spec)
    whole, _ = onnx_run(tmp_path / "model_stateful.onnx")(x, states)
    y, _ = chunked(onnx_run(tmp_path / "model_stateful.onnx"), x, 4, states)
    assert np.abs(y - whole).max() > 1e-2  # the backward half of each chunk saw only that chunk


@pytest.mark.slow
def test_streaming_example_on_the_char_lm(char_lm_out):
    pytest.importorskip("tensorflow")
    import streaming

    lm = char_lm_out[0]
    with open(lm / "manifest.json") as f:
        assert json.load(f)["stacks"][0]["artifacts"]["onnx_stateful"] == "layers/lstm/model_stateful.onnx"
    vocab = os.path.join(ROOT, "models", "char_lm", "vocab.json")
    lines = []
    diff = streaming.char_lm(str(lm), vocab, "Shall I compare thee", 3, log=lines.append)
    assert diff <= ATOL_FP32 and len(lines) == 8, lines
    assert streaming.check_stacks(str(lm), 3, log=lines.append) <= ATOL_FP32
