"""TF1 checkpoints that hold only canonical cell tensors (``cudnn_compatible_lstm_cell``,
``cudnn_compatible_gru_cell``, ``lstm_cell``), as TF's cuDNN saveables and the cuDNN-compatible cells wrote them,
without any cuDNN buffer. The tensors are drawn at random here (they are the original model); every artifact is
judged by stock TF1 kernels (``BlockLSTM``, the GRU cell's ops) restoring the ORIGINAL checkpoint by name."""
import numpy as np
import pytest

from helpers import ATOL_FP32, make_spec, ragged_batch, run_cli, tree_hash
from cudnn_port import convert
from cudnn_port.judging.stock import tf1_cells
from cudnn_port.verify import verify

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow  # checkpoints converted to every artifact


def original_tensors(spec, prefix, legacy=False, cell=None, seed=0):
    """Random canonical tensors under TF1's names, as a TF1 graph built on the cells holds them: LSTM
    ``{cell}/kernel [I_l + H, 4H]``, ``bias [4H]`` (older names also ``bias_cudnn_0/1``, which sum to ``bias``);
    GRU ``gates/…``, ``candidate/…``. Written from the names TF1 uses, not from this project's writers."""
    rng = np.random.default_rng(seed)
    H, out = spec.num_units, {}
    rand = lambda *shape: (rng.normal(size=shape) * 0.3).astype("float32")
    cell = cell or ("cudnn_compatible_lstm_cell" if spec.mode == "lstm" else "cudnn_compatible_gru_cell")
    for layer in range(spec.num_layers):
        width = spec.layer_input_size(layer)
        for direction in range(spec.num_dirs):
            if spec.bidirectional:
                scope = f"stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{'fw' if direction == 0 else 'bw'}"
            else:
                scope = f"{'' if legacy else 'rnn/'}multi_rnn_cell/cell_{layer}"
            scope = f"{prefix}/{scope}/{cell}" if prefix else f"{scope}/{cell}"
            if spec.mode == "lstm":
                out[f"{scope}/kernel"] = rand(width + H, 4 * H)
                if legacy:
                    b0, b1 = rand(4 * H), rand(4 * H)
                    out.update({f"{scope}/bias_cudnn_0": b0, f"{scope}/bias_cudnn_1": b1, f"{scope}/bias": b0 + b1})
                else:
                    out[f"{scope}/bias"] = rand(4 * H)
            else:
                out.update({f"{scope}/gates/kernel": rand(width + H, 2 * H), f"{scope}/gates/bias": rand(2 * H),
                            f"{scope}/candidate/input_projection/kernel": rand(width, H),
                            f"{scope}/candidate/input_projection/bias": rand(H),
                            f"{scope}/candidate/hidden_projection/kernel": rand(H, H),
                            f"{scope}/candidate/hidden_projection/bias": rand(H)})
    return out


CASES = {  # id: (spec, prefix, legacy, cell)
    "lstm-bi-2": (make_spec("lstm", 2, True), "encoder", False, None),
    "gru-uni-3": (make_spec("gru", 3, False), "", False, None),
    "gru-bi-2": (make_spec("gru", 2, True), "decoder", False, None),
    "lstm-uni-2-older-names": (make_spec("lstm", 2, False), "cudnn_lstm", True, None),
    "lstm-uni-2-lstm_cell": (make_spec("lstm", 2, False), "", False, "lstm_cell"),
}


def save_original(tmp_path, case, seed=3):
    from make_tf1_checkpoint import save_tf1

    spec, prefix, legacy, cell = CASES[case]
    tensors = original_tensors(spec, prefix, legacy, cell, seed)
    others = {"dense/kernel": np.ones((spec.num_dirs * spec.num_units, 2), "float32"), "global_step": np.int64(9)}
    src = save_tf1(str(tmp_path / "src" / "model.ckpt"), {**tensors, **others})
    return src, tensors, others


@pytest.mark.parametrize("case", list(CASES))
def test_canonical_only_checkpoint_converts_and_every_artifact_computes_the_original(tmp_path, case):
    import onnxruntime as ort

    spec, prefix, legacy, cell = CASES[case]
    src, tensors, others = save_original(tmp_path, case)
    before = tree_hash(tmp_path / "src")
    manifest = convert(src, tmp_path / "out")  # no flags: the names and shapes state the spec
    (stack,) = manifest["stacks"]
    assert stack["spec"] == spec.to_dict() and "TF1 canonical cells" in stack["spec_source"]

    x, lengths, h_0, c_0 = ragged_batch(spec, seed=5)
    c_0 = c_0 if spec.mode == "lstm" else None
    judge_dir, judge_prefix = tmp_path / "src", prefix
    if not prefix or cell == "lstm_cell":  # the judge restores the same original arrays saved again under a scope
        from make_tf1_checkpoint import save_tf1  # and, for lstm_cell, the cell name BlockLSTM's judge restores

        judge_dir, judge_prefix = tmp_path / "judge", "judge"
        save_tf1(str(judge_dir / "model.ckpt"), {f"judge/{n}".replace("/lstm_cell/", "/cudnn_compatible_lstm_cell/"):
                                                 v for n, v in tensors.items()})
    want = tf1_cells(spec, judge_prefix, str(judge_dir), x, lengths, h_0, c_0, legacy=legacy)  # the original
    feeds = {"inputs": x, "sequence_lengths": lengths, "initial_h": h_0}
    if c_0 is not None:
        feeds["initial_c"] = c_0
    session = ort.InferenceSession(str(tmp_path / "out" / "model_stateful.onnx"), providers=["CPUExecutionProvider"])
    saved = tf.saved_model.load(str(tmp_path / "out" / "saved_model")).signatures["with_initial_state"]
    got_saved = saved(**{k: tf.constant(v) for k, v in feeds.items()})
    for what, got in (("onnx", session.run(None, feeds)),
                      ("saved_model", [got_saved[k].numpy() for k in ("outputs", "final_h", "final_c")
                                       if k in got_saved])):
        for name, g, w in zip(("outputs", "h_n", "c_n"), got, want):
            if w is not None:
                err = float(np.max(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))))
                assert err <= ATOL_FP32, f"{case} {what} {name}: {err:.3g}"  # fp32 vs fp32 TF kernels

    reader = tf.train.load_checkpoint(str(tmp_path / "out" / "checkpoint"))  # the originals land unchanged
    for name, value in {**tensors, **others}.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value, err_msg=name)
    assert "opaque_kernel" not in "".join(reader.get_variable_to_shape_map())
    assert verify(tmp_path / "out")["passed"]
    assert tree_hash(tmp_path / "src") == before


def test_a_gate_order_the_reader_and_writer_share_fails_every_row_of_the_stack(tmp_path, monkeypatch):
    """The tf1 target reads and writes TF1's LSTM kernel columns as i, f, c, o instead of i, j(c), f, o: reader and
    writer agree with each other, so convert's round-trip check passes, but every artifact is wrong. verify's
    per-stack judge reads the checkpoint's TF1 tensors by their own names and order (judging/tf1_weights.py), so
    every artifact's row fails. Nothing else does: the files and copied variables are as written, and OUT/checkpoint
    (tf1 style: the source's tensors read and written back under the same names) holds the original values."""
    from cudnn_port.targets import tf1

    src, _, _ = save_original(tmp_path, "lstm-bi-2")
    with monkeypatch.context() as patch:
        patch.setattr(tf1, "TF1_LSTM", "ifco")
        manifest = convert(src, tmp_path / "out", formats=["checkpoint", "saved_model", "onnx"])
        report = verify(tmp_path / "out")
    stack = manifest["stacks"][0]["variable"]
    failed = {r["artifact"] for r in report["rows"] if r["passed"] is False}
    judged = {r["artifact"] for r in report["rows"] if r.get("stack") == stack and r["passed"] is not None}
    right = {"checkpoint (tf1 style)"}  # tf1 style rewrites the source's tensors: read and written back the same
    assert right < judged and failed == judged - right, (failed, judged)
    assert all("TF1 cell tensors" in (r.get("judge") or "") for r in report["rows"] if r["artifact"] in judged)


def test_inspect_says_what_canonical_cells_are(tmp_path, capsys):
    src, _, _ = save_original(tmp_path, "lstm-bi-2")
    code, out, err = run_cli(capsys, "inspect", src)
    assert code == 0, err
    assert "no cuDNN buffer: TF1 canonical cells (CudnnCompatibleLSTMCell) under 'encoder'" in out
    assert "2-layer bidirectional LSTM, input 6, hidden 5" in out


def test_keras_style_keeps_the_original_tensors_beside_the_converted_ones(tmp_path):
    src, tensors, _ = save_original(tmp_path, "gru-bi-2")
    manifest = convert(src, tmp_path / "out", style="keras", formats=["checkpoint"])
    reader = tf.train.load_checkpoint(str(tmp_path / "out" / "checkpoint"))
    for name, value in tensors.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value, err_msg=name)
    assert set(manifest["name_map"]["decoder/opaque_kernel"]) <= set(reader.get_variable_to_shape_map())


def test_canonical_cells_with_a_layer_missing_are_refused(tmp_path, capsys):
    from make_tf1_checkpoint import save_tf1

    spec, prefix, legacy, cell = CASES["lstm-bi-2"]
    tensors = original_tensors(spec, prefix, legacy, cell)
    del tensors["encoder/stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw/cudnn_compatible_lstm_cell/kernel"]
    src = save_tf1(str(tmp_path / "src" / "model.ckpt"), tensors)
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "out")
    assert code == 2 and "lack encoder/stack_bidirectional_rnn/cell_0/bidirectional_rnn/bw" in err, err
    assert not (tmp_path / "out").exists()


def test_canonical_cells_whose_shapes_disagree_are_refused(tmp_path, capsys):
    from make_tf1_checkpoint import save_tf1

    spec, prefix, legacy, cell = CASES["gru-uni-3"]
    tensors = original_tensors(spec, "model", legacy, cell)
    tensors["model/rnn/multi_rnn_cell/cell_2/cudnn_compatible_gru_cell/gates/kernel"] = np.zeros((9, 10), "float32")
    src = save_tf1(str(tmp_path / "src" / "model.ckpt"), tensors)
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "out")
    assert code == 2 and "cell_2/cudnn_compatible_gru_cell/gates/kernel has shape [9, 10]" in err, err
    assert "need [10, 10]" in err and not (tmp_path / "out").exists()
