"""TFLite export (``--formats tflite``): OUT/model.tflite and OUT/model_stateful.tflite against the NumPy reference,
run by LiteRT's interpreter through its own SignatureDef runner (no cudnn_port code on the judging path).

Tolerance: ATOL_FP32 (1e-5), the bound every fp32 artifact meets; measured max |error| here is ~2e-7.
"""
import json
import os

import numpy as np
import pytest

from helpers import ATOL_FP32, op_codes, random_canon
from cudnn_port import cli, convert, reference
from cudnn_port import formats as registry
from cudnn_port.formats.jobs import StackJob
from cudnn_port.layout import RNNSpec

litert = pytest.importorskip("ai_edge_litert.interpreter", reason="ai-edge-litert is not installed "
                             "(pip install 'cudnn-port[tflite]')")
pytestmark = pytest.mark.slow  # TFLite models written and converted, the char LM trained

# held-out stacks: input 6 != hidden 5, projection 3; 1-3 layers, both directions, LSTM and GRU
SPECS = [RNNSpec("lstm", 1, 5, 6), RNNSpec("lstm", 2, 5, 6, bidirectional=True), RNNSpec("lstm", 3, 5, 6, num_proj=3),
         RNNSpec("lstm", 2, 5, 6, bidirectional=True, num_proj=3), RNNSpec("gru", 1, 5, 6, bidirectional=True),
         RNNSpec("gru", 3, 5, 6), RNNSpec("gru", 2, 5, 6, bidirectional=True)]
IDS = [f"{s.mode}-L{s.num_layers}-{'bi' if s.bidirectional else 'uni'}{'-proj' if s.num_proj else ''}" for s in SPECS]
FLEX = "Flex"  # TF ops in a TFLite model are custom ops named Flex<Op>


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Each spec's two TFLite files, written by the registry's tflite format: {spec: (canon, {key: path})}."""
    fmt, made = registry.get("tflite"), {}
    for i, spec in enumerate(SPECS):
        tmp = tmp_path_factory.mktemp(f"tflite{i}")
        paths = {a.key: str(tmp / a.where("rnn")) for a in fmt.artifacts}
        fmt.write(StackJob(spec, random_canon(spec, seed=i), "rnn"), paths)
        made[spec] = (random_canon(spec, seed=i), paths)
    return made


def run_litert(path, feeds):
    """LiteRT's interpreter, called through the model's SignatureDef (it resizes the inputs itself)."""
    runner = litert.Interpreter(model_path=path).get_signature_runner("serving_default")
    result = runner(**feeds)
    return [result.get(n) for n in ("outputs", "final_h", "final_c")]


def batch(spec, lengths, seed=1, states=True):
    rng = np.random.default_rng(seed)
    B, T = len(lengths), max(lengths)
    feeds = {"inputs": rng.normal(size=(B, T, spec.input_size)).astype(np.float32),
             "sequence_lengths": np.asarray(lengths, np.int32)}
    if states:
        feeds["initial_h"] = (rng.normal(size=(spec.num_pseudo_layers, B, spec.state_size)) * 0.5).astype(np.float32)
        if spec.mode == "lstm":
            feeds["initial_c"] = (rng.normal(size=(spec.num_pseudo_layers, B, spec.num_units)) * 0.5).astype(
                np.float32)
    return feeds


def assert_matches(got, canon, feeds):
    want = reference.forward(canon, feeds["inputs"], feeds["sequence_lengths"], feeds.get("initial_h"),
                             feeds.get("initial_c"))
    for name, g, w in zip(("outputs", "final_h", "final_c"), got, want):
        if w is None:
            assert g is None, f"{name}: a GRU has no cell state"
            continue
        err = float(np.max(np.abs(g - w)))
        assert g.shape == w.shape and err <= ATOL_FP32, f"{name}: shape {g.shape} vs {w.shape}, max |error| {err:.3g}"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_builtin_ops_only_and_a_fused_lstm_op(written, spec):
    _, paths = written[spec]
    for path in paths.values():
        builtin, custom = op_codes(path)
        ops = builtin | custom
        assert not [op for op in ops if op.startswith(FLEX) or op == "CUSTOM"], ops
        fused = {"UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM"} & ops
        assert bool(fused) == (spec.mode == "lstm"), ops
        assert spec.mode == "lstm" or "WHILE" in ops, ops


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
@pytest.mark.parametrize("lengths", [[7], [1], [7, 1, 4, 6]], ids=["batch1", "batch1-len1", "ragged"])
def test_matches_the_reference(written, spec, lengths):
    """Both files at batch 1 and on a ragged batch (lengths 1 .. T): model.tflite from zero states,
    model_stateful.tflite from non-zero ones; outputs zero past each length, final states at each length."""
    canon, paths = written[spec]
    plain = batch(spec, lengths, states=False)
    assert_matches(run_litert(paths["tflite"], plain), canon, plain)
    fed = batch(spec, lengths, seed=2)
    assert_matches(run_litert(paths["tflite_stateful"], fed), canon, fed)


@pytest.mark.parametrize("spec", [s for s in SPECS if not s.bidirectional], ids=lambda s: f"{s.mode}-L{s.num_layers}")
def test_streaming_chunks_equal_one_call(written, spec):
    """model_stateful.tflite at batch 1, fed chunk after chunk (sizes 1, 3, 2) with the states it returned, gives
    the whole-sequence reference's outputs and final states."""
    canon, paths = written[spec]
    whole = batch(spec, [6], seed=3)
    runner = litert.Interpreter(model_path=paths["tflite_stateful"]).get_signature_runner("serving_default")
    h, c, ys = whole["initial_h"], whole.get("initial_c"), []
    for start, stop in ((0, 1), (1, 4), (4, 6)):
        feeds = {"inputs": whole["inputs"][:, start:stop], "sequence_lengths": np.array([stop - start], np.int32),
                 "initial_h": h}
        if c is not None:
            feeds["initial_c"] = c
        result = runner(**feeds)
        ys.append(result["outputs"])
        h, c = result["final_h"], result.get("final_c")
    assert_matches([np.concatenate(ys, axis=1), h, c], canon, whole)


def test_convert_verify_and_bench_rows(tmp_path, tf1_ckpt, capsys):
    """--formats tflite through the CLI: both files listed in the manifest, verify passes with rows judged in LiteRT,
    bench times both at batch 1 and 32."""
    out = tmp_path / "out"
    assert cli.main(["convert", tf1_ckpt, str(out), "--formats", "checkpoint,tflite", "--quiet"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stacks"][0]["artifacts"] == {"tflite": "model.tflite", "tflite_stateful": "model_stateful.tflite"}
    capsys.readouterr()
    assert cli.main(["verify", str(out), "--json", "--quiet"]) == 0
    rows = {r["artifact"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    for name in ("tflite (litert)", "tflite_stateful (litert)", "tflite (tf.lite)", "tflite_stateful (tf.lite)"):
        assert rows[name]["passed"] and rows[name]["max_abs"] <= ATOL_FP32, rows[name]
    assert cli.main(["bench", str(out), "--steps", "4", "--repeat", "1", "--json", "--quiet"]) == 0
    cases = {(r["artifact"], r["batch"]) for r in json.loads(capsys.readouterr().out)["rows"]}
    assert cases == {(a, b) for a in ("tflite", "tflite_stateful") for b in (1, 32)}


def test_verify_catches_a_wrong_tflite_model(tmp_path, tf1_ckpt, capsys):
    """A model.tflite of other weights (same spec) in place of the written one fails its verify row."""
    out = tmp_path / "out"
    convert(tf1_ckpt, out, formats=["checkpoint", "tflite"])
    spec = RNNSpec(**{k: v for k, v in json.loads((out / "manifest.json").read_text())["stacks"][0]["spec"].items()
                      if k in ("mode", "num_layers", "num_units", "input_size", "bidirectional", "num_proj")})
    from cudnn_port.exports.tflite import build_model

    data = build_model(random_canon(spec, seed=9))
    (out / "model.tflite").write_bytes(data)
    capsys.readouterr()
    assert cli.main(["verify", str(out), "--json", "--quiet"]) == 1
    rows = {r["artifact"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["tflite (litert)"]["passed"] is False and rows["tflite_stateful (litert)"]["passed"]


def test_char_lm_generates_the_same_text_from_tflite_and_onnx(tmp_path):
    """A tiny char LM, trained a few steps and exported: beam search over its LiteRT step model gives the same
    beams as over its ONNX step model and its SavedModel, with the same scores (fp32: 1e-4 after 6 steps)."""
    import char_lm
    import cudnn_port
    from cudnn_port.readers.keras_model import load_keras_file

    sizes = dict(char_lm.TINY, steps=3)
    char_lm.train(str(tmp_path), **sizes, log=lambda *a: None)
    cudnn_port.export(load_keras_file(str(tmp_path / "model.keras")), str(tmp_path / "export"), force=True)
    prompts = np.array([[3, 5, 7], [1, 2, 3]], np.int32)
    found = {}
    for runtime in ("tflite", "onnx"):
        found[runtime] = char_lm.StepDecoder(str(tmp_path / "export"), runtime=runtime).search(prompts, 3, 6)
    sequences, scores = (np.asarray(t) for t in char_lm.Decoder(str(tmp_path / "export")).search(prompts, 3, 6))
    for runtime, (seq, sc) in found.items():
        assert seq.tolist() == sequences.tolist(), runtime
        assert np.max(np.abs(sc - scores)) <= 1e-4, runtime
    with open(tmp_path / "vocab.json") as f:
        vocab = json.load(f)
    texts = {r: char_lm.generate(str(tmp_path / "export"), vocab, ["abc"], beams=2, steps=8, log=lambda *a: None,
                                 runtime=r)[0] for r in ("tflite", "onnx")}
    assert texts["tflite"] == texts["onnx"]
    assert os.path.exists(tmp_path / "export" / "layers" / "lstm" / "model_stateful.tflite")


def test_registry_and_import_stay_light():
    """``import cudnn_port`` and loading the format registry import neither LiteRT, flatbuffers nor TensorFlow."""
    import subprocess
    import sys

    code = ("import sys, cudnn_port; from cudnn_port import formats; assert 'tflite' in formats.names(); "
            "print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('ai_edge_litert', 'flatbuffers', 'tensorflow')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.stdout.strip() == "[]", done.stdout
