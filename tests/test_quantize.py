"""int8 ONNX (convert --quantize int8): the interface is kept, the judge passes correct models and fails wrong ones,
GRU stacks are refused, and convert/verify carry it through."""
import json

import numpy as np
import onnx
import pytest

from helpers import ROOT, assert_clean_error, make_spec, random_canon, run_cli, write_source
from cudnn_port import cli, reference
from cudnn_port.errors import CudnnPortError
from cudnn_port.exports import io_names
from cudnn_port.exports.onnx import write_onnx
from cudnn_port.exports.quantize import quantize_onnx
from cudnn_port.judging.int8 import int8_row
from cudnn_port.judging.parity import sample_batch

pytest.importorskip("onnxruntime")


def int8_of(canon, tmp_path, states=True):
    src, dst = tmp_path / "fp32.onnx", tmp_path / "int8.onnx"
    write_onnx(canon, src, states=states)
    return quantize_onnx(src, dst), dst


def judged(path, spec, canon, steps=9, states=True):
    x, lengths, h, c = sample_batch(spec, 4, steps)
    if not states:
        return int8_row("int8", path, spec, canon, {"inputs": x, "sequence_lengths": lengths},
                        reference.forward(canon, x, lengths))
    return int8_row("int8", path, spec, canon, dict(zip(io_names(spec)[0], (x, lengths, h, c))),
                    reference.forward(canon, x, lengths, h, c))


@pytest.mark.parametrize("states", [True, False], ids=["stateful", "no_states"])
@pytest.mark.parametrize("layers,bi,hidden", [(1, False, 5), (2, True, 16), (3, True, 16)])
def test_int8_keeps_the_interface_and_passes_its_judge(tmp_path, layers, bi, hidden, states):
    canon = random_canon(make_spec("lstm", layers, bi, input_size=24, hidden=hidden))
    report, path = int8_of(canon, tmp_path, states)
    model = onnx.load(path)
    assert [i.name for i in model.graph.input] == list(io_names(canon.spec)[0][:4 if states else 2])
    assert [o.name for o in model.graph.output] == list(io_names(canon.spec)[1])
    assert not model.graph.initializer or not {i.name for i in model.graph.initializer} & {
        i.name for i in model.graph.input}
    nodes = layers * (2 if bi else 1)  # one forward node per layer and direction
    assert report["quantized"] == {"LSTM": nodes} and not report["float32_left"]
    assert [n.op_type for n in model.graph.node].count("DynamicQuantizeLSTM") == nodes
    assert report["bytes"]["int8"] < report["bytes"]["float32"]
    row = judged(path, canon.spec, canon, steps=20, states=states)
    assert row["passed"] and row["weights_worst_steps"] <= 0.5 + 1e-3, row


def test_the_judge_fails_other_weights_and_dropped_lengths(tmp_path):
    spec = make_spec("lstm", 2, True, input_size=24, hidden=16)
    canon, other = random_canon(spec, seed=0), random_canon(spec, seed=1)
    _, path = int8_of(other, tmp_path)
    row = judged(path, spec, canon)
    assert not row["passed"] and "from the source" in row["note"], row  # the weight check, besides the outputs
    _, path = int8_of(canon, tmp_path)
    model = onnx.load(path)
    for node in model.graph.node:
        if node.op_type == "DynamicQuantizeLSTM":
            node.input[4] = ""  # sequence_lens
    onnx.save(model, path)
    row = judged(path, spec, canon)  # the outputs are masked, but c runs on past each length
    assert not row["passed"] and "final_c" in row["note"], row


def test_gru_is_refused(tmp_path):
    canon = random_canon(make_spec("gru", 2, True))
    write_onnx(canon, tmp_path / "gru.onnx")
    with pytest.raises(CudnnPortError, match="no int8 GRU or RNN kernel"):
        quantize_onnx(tmp_path / "gru.onnx", tmp_path / "gru_int8.onnx")
    assert not (tmp_path / "gru_int8.onnx").exists()


@pytest.mark.slow
def test_convert_quantize_int8_then_verify(tmp_path, capsys):
    import os

    src = os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt")
    code = cli.main(["convert", src, str(tmp_path / "out"), "--quantize", "int8", "--json", "--quiet"])
    manifest = json.loads(capsys.readouterr().out)
    arts = manifest["stacks"][0]["artifacts"]
    assert code == 0 and arts["onnx_int8"] == "model_int8.onnx"
    assert arts["onnx_stateful_int8"] == "model_stateful_int8.onnx"
    assert [w["quantized"] for w in manifest["int8"]] == [{"LSTM": 4}] * 2  # 2 layers x 2 directions, 2 files
    code = cli.main(["verify", str(tmp_path / "out")])
    text = capsys.readouterr().out
    for label in ("onnx int8", "onnx_stateful int8"):
        assert code == 0 and [line for line in text.splitlines() if label in line and "pass" in line], text


def test_quantize_int8_of_a_gru_only_source_is_refused(tmp_path, capsys):
    spec = make_spec("gru", 1, False)
    src, _ = write_source(tmp_path, spec, name="cudnn_gru/opaque_kernel")
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "out", "--quantize", "int8", *spec.flags().split())
    assert_clean_error(code, err, "nothing to quantize", "GRU")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_whole_model_int8_is_judged_with_a_finite_tolerance(tmp_path):
    """A whole Keras model's int8 ONNX is judged against the fp32 judge within 3x / 1.5x the error of the same model
    with exact int8 rounding (a finite bound, as each stack's int8 row); one LSTM gate's int8 weights negated
    (the manifest's hashes rewritten, as a tamperer would) fails that row."""
    import keras
    import onnx
    from onnx import numpy_helper

    from cudnn_port import export, verify
    from cudnn_port.benchmark import bench
    from cudnn_port.outdir import MANIFEST
    from cudnn_port.paths import sha256

    L = keras.layers
    ids = keras.Input((None,), dtype="int32", name="ids")
    x = L.Bidirectional(L.LSTM(12, return_sequences=True))(L.Embedding(30, 8, mask_zero=True)(ids))
    model = keras.Model(ids, L.Dense(4)(L.LSTM(10)(x)))
    rng = np.random.default_rng(2)
    model.set_weights([(rng.normal(size=w.shape) * 0.4).astype(w.dtype) for w in model.get_weights()])
    out = tmp_path / "out"
    manifest = export(model, out, formats=["onnx", "saved_model"], quantize="int8")  # bench feeds its signature
    report = verify(out)
    row = next(r for r in report["rows"] if r["stack"] == "(whole model)" and "int8" in r["artifact"])
    assert report["passed"] and row["passed"] is True and 0 < row["max_abs"] <= row["tolerance"] < 1, row
    timed = {(r["stack"], r["artifact"]) for r in bench(out, batches=(2,), steps=5, repeat=1)["rows"]}
    assert ("(whole model)", "onnx int8 (onnxruntime)") in timed, timed  # bench times int8 like any artifact,
    assert {a for s, a in timed if s != "(whole model)" and "int8" in a} == {  # in the runtime its judge runs
        "onnx int8 (onnxruntime)", "onnx_stateful int8 (onnxruntime)"}, timed
    path = out / manifest.model_artifacts["onnx_int8"]
    tampered = onnx.load(str(path))
    node = next(n for n in tampered.graph.node if n.op_type == "DynamicQuantizeLSTM")
    weights = next(i for i in tampered.graph.initializer if i.name == node.input[1])
    w = numpy_helper.to_array(weights).copy()
    w[..., : w.shape[-1] // 4] *= -1  # one gate's int8 weights, sign flipped
    weights.CopyFrom(numpy_helper.from_array(w, weights.name))
    onnx.save(tampered, str(path))
    record = json.load(open(out / MANIFEST))
    record["files"] = {rel: sha256(str(out / rel)) for rel in record["files"] if (out / rel).exists()}
    json.dump(record, open(out / MANIFEST, "w"))
    report = verify(out)
    row = next(r for r in report["rows"] if r["stack"] == "(whole model)" and "int8" in r["artifact"])
    assert not report["passed"] and row["passed"] is False, row
