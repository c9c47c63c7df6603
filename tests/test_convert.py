"""convert / inspect as a library and as a CLI: what is written, and every bad input refused cleanly."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import SAMPLE_SPEC, assert_all_close, assert_clean_error, assert_close, make_spec, ragged_batch, \
    random_blob, run_cli, spec_flags, tree_hash, write_source
from cudnn_port import cli, reference
from cudnn_port.checkpoint import Checkpoint
from cudnn_port.paths import sha256
from cudnn_port import convert, inspect_checkpoint
from cudnn_port.layout import unpack
from cudnn_port.targets import STYLES
from tf1_cells import canonical_tensors as tf1_canonical_tensors

tf = pytest.importorskip("tensorflow")


# ----------------------------------------------------------------------------------------------- what is written

@pytest.mark.parametrize("style", sorted(STYLES))
def test_sample_converts_without_flags_and_keeps_everything_else(tmp_path, tf1_ckpt, style):
    before = tree_hash(os.path.dirname(tf1_ckpt))
    manifest = convert(tf1_ckpt, tmp_path / "out", style=style, formats=["checkpoint"])  # the file read below
    assert tree_hash(os.path.dirname(tf1_ckpt)) == before, "the input checkpoint was modified"
    src, out = Checkpoint(tf1_ckpt), Checkpoint(tmp_path / "out" / "checkpoint")
    assert tf.train.latest_checkpoint(str(tmp_path / "out" / "checkpoint")).endswith("model.ckpt")
    # Every non-cuDNN variable is copied unchanged, with its dtype.
    others = [n for n in src.names if "opaque_kernel" not in n]
    assert sorted(manifest["copied"]) == sorted(others)
    for name in others:
        assert out.dtypes[name] == src.dtypes[name]
        assert out.get(name).tobytes() == src.get(name).tobytes(), name
    # The buffer and its slots are gone, replaced by the style's tensors: judged by stock components restoring them
    # by name, against the reference on the source buffer.
    stack = manifest["stacks"][0]
    assert stack["spec"] == SAMPLE_SPEC.to_dict() and "chosen by clues" in stack["spec_source"]
    assert not any(n.startswith("cudnn_lstm/opaque_kernel") for n in out.names)
    canon = unpack(SAMPLE_SPEC, src.get("cudnn_lstm/opaque_kernel"))
    x, lengths, h_0, c_0 = ragged_batch(SAMPLE_SPEC)
    want = reference.forward(canon, x, lengths, h_0, c_0)
    got = stock_forward(style, str(tmp_path / "out" / "checkpoint"), stack["targets"], x, lengths, h_0, c_0)
    assert_all_close(got, want, f"{style} checkpoint")
    # Slots: the same mapping, written here from each format's definition; a summed bias takes b_W's slot.
    for slot in ("Adam", "Adam_1"):
        slot_canon = unpack(SAMPLE_SPEC, src.get(f"cudnn_lstm/opaque_kernel/{slot}"))
        for name, value in slot_tensors(style, slot_canon).items():
            np.testing.assert_array_equal(out.get(f"cudnn_lstm/{name}/{slot}"), value, err_msg=f"{name}/{slot}")
        assert stack["slots"][f"cudnn_lstm/opaque_kernel/{slot}"]["max_abs_b_W_minus_b_R"] == 0.0
    # Manifest: every file hashed, name map complete.
    for rel, digest in manifest["files"].items():
        assert sha256(tmp_path / "out" / rel) == digest
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["name_map"] == manifest["name_map"]
    assert set(manifest["name_map"]) == set(src.names)
    assert manifest["source"]["files"] == {os.path.basename(f): sha256(f) for f in src.files()} != {}


def stock_forward(style, ckpt_dir, names, x, lengths, h_0, c_0):
    """The converted sample restored by name into stock TF1 cells, Keras layers or PyTorch modules."""
    from cudnn_port.formats.pytorch import torch_modules
    from cudnn_port.judging.stock import keras_layers, tf1_cells

    if style == "tf1":
        return tf1_cells(SAMPLE_SPEC, "cudnn_lstm", ckpt_dir, x, lengths, h_0, c_0)
    stored = tf.train.load_checkpoint(ckpt_dir)
    tensors = {n: stored.get_tensor(n) for n in names}
    if style == "keras":
        return keras_layers(SAMPLE_SPEC, tensors, lambda k, d: f"cudnn_lstm/layer_{k}/{'backward' if d else 'forward'}",
                            x, lengths, h_0, c_0)
    return torch_modules(SAMPLE_SPEC, {n[len("cudnn_lstm/"):]: v for n, v in tensors.items()}, x, lengths, h_0, c_0)


def slot_tensors(style, canon):
    """An optimizer slot of the buffer in ``style``'s names and layout, written from each format's definition
    (docs/conventions.md, section 3): TF1 kernel = [W_g R_g] stacked in gate order i, c, f, o, transposed; Keras
    kernels = W_g.T side by side in i, f, c, o; PyTorch = W_g stacked in cuDNN's order; a summed bias is b_W's."""
    out = {}
    for layer, direction, p in canon.pseudo_layers():
        if style == "tf1":
            scope = f"stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{'bw' if direction else 'fw'}/" \
                    "cudnn_compatible_lstm_cell"
            icfo = [0, 2, 1, 3]
            out[f"{scope}/kernel"] = np.concatenate([np.concatenate([p.W[g], p.R[g]], 1) for g in icfo]).T
            out[f"{scope}/bias"] = np.concatenate([p.b_W[g] for g in icfo])
        elif style == "keras":
            scope = f"layer_{layer}/{'backward' if direction else 'forward'}"
            out[f"{scope}/kernel"] = np.concatenate([p.W[g].T for g in range(4)], 1)
            out[f"{scope}/recurrent_kernel"] = np.concatenate([p.R[g].T for g in range(4)], 1)
            out[f"{scope}/bias"] = p.b_W.reshape(-1)
        else:
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            out.update({f"weight_ih{suffix}": p.W.reshape(-1, p.W.shape[2]), f"weight_hh{suffix}": p.R.reshape(-1, 48),
                        f"bias_ih{suffix}": p.b_W.reshape(-1), f"bias_hh{suffix}": p.b_R.reshape(-1)})
    return out


def test_summed_bias_slot_uses_b_W_slot_not_the_sum(tmp_path):
    spec = make_spec("lstm", 1, False)
    slot = random_blob(spec, seed=5)
    src, _ = write_source(tmp_path, spec, extra={"cudnn_lstm/opaque_kernel/Momentum": slot})
    convert(src, tmp_path / "out", formats=["checkpoint"], **spec_flags(spec))
    bias = Checkpoint(tmp_path / "out" / "checkpoint").get(
        "cudnn_lstm/rnn/multi_rnn_cell/cell_0/cudnn_compatible_lstm_cell/bias/Momentum")
    b_W = unpack(spec, slot).layers[0].b_W
    np.testing.assert_array_equal(bias.reshape(4, -1), b_W[[0, 2, 1, 3]])  # i, c, f, o


def test_drop_optimizer_slots(tmp_path, tf1_ckpt):
    manifest = convert(tf1_ckpt, tmp_path / "out", formats=["checkpoint"], drop_optimizer_slots=True)
    names = Checkpoint(tmp_path / "out" / "checkpoint").names
    assert not any(n.endswith(("/Adam", "/Adam_1")) for n in names)
    assert sorted(manifest["dropped"]) == ["cudnn_lstm/opaque_kernel/Adam", "cudnn_lstm/opaque_kernel/Adam_1"]


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_dtype_is_kept(tmp_path, dtype):
    spec = make_spec("gru", 2, True, dtype=dtype)
    src, blob = write_source(tmp_path, spec, name="cudnn_gru/opaque_kernel")
    convert(src, tmp_path / "out", style="pytorch", formats=["checkpoint", "pytorch"], **spec_flags(spec))
    out = Checkpoint(tmp_path / "out" / "checkpoint")
    name = "cudnn_gru/weight_hh_l1_reverse"
    assert out.dtypes[name] == dtype
    np.testing.assert_array_equal(out.get(name), unpack(spec, blob).layer(1, 1).R.reshape(-1, spec.num_units))


def test_object_based_checkpoint(tmp_path):
    spec = make_spec("lstm", 2, False)
    blob = random_blob(spec)
    module = tf.Module()
    with tf.name_scope("enc"):
        module.rnn = tf.Module()
        module.rnn.opaque_kernel = tf.Variable(blob)
    module.head = tf.Variable(np.arange(6, dtype="float32").reshape(2, 3))
    path = tf.train.Checkpoint(model=module).write(str(tmp_path / "src" / "ckpt"))
    report = inspect_checkpoint(path, **spec_flags(spec))
    assert report["format"].startswith("object-based")
    assert report["stacks"][0]["variable"] == "model/rnn/opaque_kernel"
    manifest = convert(path, tmp_path / "out", formats=["checkpoint"], **spec_flags(spec))
    out = Checkpoint(tmp_path / "out" / "checkpoint")
    kernel = out.get("model/rnn/rnn/multi_rnn_cell/cell_1/cudnn_compatible_lstm_cell/kernel")
    p = unpack(spec, blob).layer(1)
    np.testing.assert_array_equal(kernel[:spec.layer_input_size(1), :spec.num_units], p.W[0].T)  # gate i, x part
    np.testing.assert_array_equal(out.get("model/head"), module.head.numpy())
    stored_keys = dict(tf.train.list_variables(str(tmp_path / "out" / "checkpoint")))
    assert "model/head" in stored_keys and not any(".ATTRIBUTES" in k for k in stored_keys)  # logical names
    assert "logical names" in manifest["source"]["names"]


def test_stored_canonical_tensors_are_checked_and_settle_the_spec(tmp_path):
    """A default TF1 Saver also wrote the canonical tensors: they fix the spec and are compared."""
    spec = make_spec("gru", 2, True)
    blob = random_blob(spec)
    canonical = tf1_canonical_tensors(unpack(spec, blob), "cudnn_gru")  # written from TF1's cells, not by our writer
    src, _ = write_source(tmp_path, spec, name="cudnn_gru/opaque_kernel", extra=dict(canonical))
    manifest = convert(src, tmp_path / "out", formats=["checkpoint"])  # no flags needed
    assert manifest["stacks"][0]["spec"] == spec.to_dict()
    assert "canonical tensors" in manifest["stacks"][0]["spec_source"]
    assert all(v["agrees"] for v in manifest["replaced"].values()) and len(manifest["replaced"]) == len(canonical)


def test_inspect_lists_candidates_and_the_flags_that_settle_them(tmp_path, capsys):
    spec = make_spec("lstm", 2, True)
    src, _ = write_source(tmp_path, spec, name="rnn/opaque_kernel")
    report = inspect_checkpoint(src)
    stack = report["stacks"][0]
    assert stack["spec"] is None and stack["candidate_count"] > 20  # a bare size: many specs fit
    assert "--num-units" in stack["settle_with"]
    narrowed = inspect_checkpoint(src, mode="lstm", num_layers=2, bidirectional=True)["stacks"][0]
    listed = [{k: c[k] for k in spec.to_dict()} for c in narrowed["candidates"]]
    assert 1 < narrowed["candidate_count"] == len(listed) <= 20 and spec.to_dict() in listed, listed
    assert all(c["mode"] == "lstm" and c["num_layers"] == 2 and c["bidirectional"] for c in listed)
    assert narrowed["settle_with"] == ["--num-units", "--input-size"]
    code, out, _ = run_cli(capsys, "inspect", src, "--json", *spec.flags().split())
    assert code == 0 and json.loads(out)["stacks"][0]["spec"] == spec.to_dict()
    code, out, _ = run_cli(capsys, "inspect", src)
    assert code == 0 and "to choose, pass" in out


@pytest.mark.slow
def test_cli_convert_json_and_force(tmp_path, tf1_ckpt, capsys):
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, "convert", tf1_ckpt, out_dir, "--json")
    assert code == 0, err
    assert json.loads(out)["stacks"][0]["spec"]["num_units"] == 48
    assert "writing checkpoint/" in err  # progress goes to stderr
    code, _, err = run_cli(capsys, "convert", tf1_ckpt, out_dir)
    assert_clean_error(code, err, "not empty", "--force")
    code, out, err = run_cli(capsys, "convert", tf1_ckpt, out_dir, "--force", "--style", "pytorch", "--quiet")
    assert code == 0 and err == "" and (out_dir / "pytorch" / "cudnn_lstm.safetensors").is_file()
    assert not (out_dir / "keras").exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []  # no temporary siblings left


# ------------------------------------------------------------------------------------------------- bad input

def test_missing_checkpoint(tmp_path, capsys):
    code, _, err = run_cli(capsys, "convert", tmp_path / "nope" / "model.ckpt", tmp_path / "out")
    assert_clean_error(code, err, "checkpoint not found", "prefix")
    assert not (tmp_path / "out").exists()


def test_truncated_data_file(tmp_path, tf1_ckpt, capsys):
    data = tf1_ckpt + ".data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    before = tree_hash(os.path.dirname(tf1_ckpt))
    code, _, err = run_cli(capsys, "convert", tf1_ckpt, tmp_path / "out")
    assert_clean_error(code, err, "truncated")
    assert not (tmp_path / "out").exists() and tree_hash(os.path.dirname(tf1_ckpt)) == before
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []


def test_corrupt_index(tmp_path, tf1_ckpt, capsys):
    with open(tf1_ckpt + ".index", "r+b") as f:
        f.seek(10)
        f.write(b"\xff" * 40)
    code, _, err = run_cli(capsys, "inspect", tf1_ckpt)
    assert_clean_error(code, err, "cannot read checkpoint")


def test_size_fits_no_spec(tmp_path, capsys):
    from make_tf1_checkpoint import save_tf1

    src = save_tf1(str(tmp_path / "src" / "model.ckpt"), {"cudnn_lstm/opaque_kernel": np.ones(7, "float32")})
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "out")
    assert_clean_error(code, err, "7 elements", "no")


def test_flags_that_do_not_fit_show_expected_and_actual(tmp_path, tf1_ckpt, capsys):
    code, _, err = run_cli(capsys, "convert", tf1_ckpt, tmp_path / "out", "--mode", "lstm", "--num-layers", "2",
                           "--num-units", "64", "--input-size", "32", "--bidirectional")
    expected = make_spec("lstm", 2, True, input_size=32, hidden=64).param_count
    assert_clean_error(code, err, f"has {SAMPLE_SPEC.param_count} elements", f"expect {expected} elements",
                       "--num-units 48")


def test_ambiguous_buffer_lists_candidates_and_flags(tmp_path, capsys):
    spec = make_spec("lstm", 2, True)
    src, _ = write_source(tmp_path, spec, name="rnn/opaque_kernel")
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "out")
    assert_clean_error(code, err, "fits", "specs", "--num-units", "to choose")


@pytest.mark.slow
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_buffer_is_refused_unless_allowed(tmp_path, capsys, bad):
    spec = make_spec("gru", 1, False)
    blob = random_blob(spec)
    blob[3] = bad
    from make_tf1_checkpoint import save_tf1

    src = save_tf1(str(tmp_path / "src" / "model.ckpt"), {"cudnn_gru/opaque_kernel": blob})
    flags = spec.flags().split()
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "out", *flags)
    assert_clean_error(code, err, "NaN/Inf", "--allow-nonfinite")
    assert not (tmp_path / "out").exists()
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "out", *flags, "--allow-nonfinite", "--style", "pytorch")
    assert code == 0, err
    w = Checkpoint(tmp_path / "out" / "checkpoint").get("cudnn_gru/weight_ih_l0")
    assert not np.isfinite(w.reshape(-1)[3])


def test_non_float_buffer(tmp_path, capsys):
    from make_tf1_checkpoint import save_tf1

    src = save_tf1(str(tmp_path / "src" / "model.ckpt"), {"cudnn_lstm/opaque_kernel": np.arange(96, dtype=np.int32)})
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "out")
    assert_clean_error(code, err, "dtype int32", "--variable")


def test_unknown_variable_and_no_buffer(tmp_path, tf1_ckpt, capsys):
    code, _, err = run_cli(capsys, "convert", tf1_ckpt, tmp_path / "out", "--variable", "nope/opaque_kernel")
    assert_clean_error(code, err, "unknown variable nope/opaque_kernel", "inspect")
    from make_tf1_checkpoint import save_tf1

    src = save_tf1(str(tmp_path / "plain" / "model.ckpt"), {"dense/kernel": np.ones((2, 2), "float32")})
    code, _, err = run_cli(capsys, "inspect", src)
    assert_clean_error(code, err, "no cuDNN buffer", "--variable")


def test_force_never_replaces_a_foreign_folder(tmp_path, tf1_ckpt, capsys):
    mine = tmp_path / "out"
    mine.mkdir()
    (mine / "notes.txt").write_text("user data")
    code, _, err = run_cli(capsys, "convert", tf1_ckpt, mine, "--force")
    assert_clean_error(code, err, "not a cudnn-port output")
    assert (mine / "notes.txt").read_text() == "user data" and os.listdir(mine) == ["notes.txt"]
    target_file = tmp_path / "file"
    target_file.write_text("x")
    code, _, err = run_cli(capsys, "convert", tf1_ckpt, target_file)
    assert_clean_error(code, err, "is a file")


def test_interrupted_run_leaves_nothing(tmp_path, tf1_ckpt, capsys, monkeypatch):
    from cudnn_port.roads import stack as stacks

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(stacks, "write_checkpoint", boom)
    code, _, err = run_cli(capsys, "convert", tf1_ckpt, tmp_path / "out", "--formats", "checkpoint,pytorch")
    assert code == 130 and "nothing was written" in err
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_unknown_format_is_a_usage_error(tmp_path, tf1_ckpt, capsys):
    code, _, err = run_cli(capsys, "convert", tf1_ckpt, tmp_path / "out", "--formats", "checkpoint,onnx2")
    assert_clean_error(code, err, "unknown format 'onnx2'")


@pytest.mark.slow
def test_real_process_exit_codes_and_no_traceback(tmp_path):
    """One end-to-end run of the installed entry point, as users call it."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-m", "cudnn_port.cli", "convert", str(tmp_path / "missing"),
                           str(tmp_path / "out"), "--json"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == 2
    proc = subprocess.run([sys.executable, "-m", "cudnn_port.cli", "--help"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "convert" in proc.stdout


@pytest.mark.slow
def test_a_custom_variable_name_converts_and_verifies(tmp_path, capsys):
    """A buffer not named *opaque_kernel, chosen with --variable, with a slot of its own."""
    spec = make_spec("gru", 2, True)
    src, blob = write_source(tmp_path, spec, name="encoder/rnn_params", seed=31, extra={
        "encoder/rnn_params/Momentum": random_blob(spec, seed=32)})
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "refused")
    assert_clean_error(code, err, "no cuDNN buffer", "--variable")
    code, out, err = run_cli(capsys, "convert", src, tmp_path / "out", "--variable", "encoder/rnn_params", "--json",
                             "--formats", "checkpoint,onnx", *spec.flags().split())
    manifest = json.loads(out)
    assert code == 0, err
    assert manifest["stacks"][0]["variable"] == "encoder/rnn_params"
    assert manifest["stacks"][0]["slots"] and "encoder/rnn_params/Momentum" in manifest["stacks"][0]["slots"]
    x, lengths, h_0, c_0 = ragged_batch(spec)
    want = reference.forward(unpack(spec, blob), x, lengths, h_0)
    from cudnn_port.judging.stock import tf1_cells

    got = tf1_cells(spec, "encoder", str(tmp_path / "out" / "checkpoint"), x, lengths, h_0, None)
    for g, w, name in zip(got, want, ("outputs", "final_h")):  # a GRU: no c
        assert_close(g, w, f"custom-name buffer, TF1 cells, {name}")
    assert cli.main(["verify", str(tmp_path / "out"), "--quiet"]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("dtype,tol", [("float16", 2e-3), ("float64", 1e-5)])
def test_fp16_and_fp64_buffers_export(tmp_path, dtype, tol):
    """The artifacts compute in fp32 from the buffer's own values: fp64 weights rounded to fp32 (error ~1e-7),
    fp16 weights exact in fp32; the reference runs in fp64 on the same weights. fp16: tol 2e-3 for the fp16
    rounding of the inputs the artifacts cast to."""
    from cudnn_port.exports import io_names
    from cudnn_port.formats.jobs import open_artifact

    spec = make_spec("lstm", 2, True, dtype=dtype)
    src, blob = write_source(tmp_path, spec, name="cudnn_lstm/opaque_kernel", seed=33)
    manifest = convert(src, tmp_path / "out", **spec_flags(spec))
    x, lengths, h_0, c_0 = ragged_batch(spec)
    want = reference.forward(unpack(spec, blob), x, lengths, h_0, c_0)
    feeds = dict(zip(io_names(spec)[0], (x, lengths, h_0, c_0)))
    for kind in ("saved_model", "graphdef", "onnx_stateful"):  # the artifacts that take states
        got = open_artifact(kind, tmp_path / "out" / manifest["stacks"][0]["artifacts"][kind], spec)(feeds).ordered(
            ["outputs", "final_h", "final_c"])
        err = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
        assert err <= tol, f"{dtype} {kind}: {err:.2e}"
    assert Checkpoint(tmp_path / "out" / "checkpoint").dtypes[manifest["stacks"][0]["targets"][0]] == dtype


def test_force_keeps_the_earlier_output_when_the_final_rename_fails(tmp_path, tf1_ckpt, capsys, monkeypatch):
    """--force replaces an earlier output in two renames; if the second fails the earlier output is put back,
    and nothing hidden is left beside it."""
    from cudnn_port import outdir

    out = tmp_path / "out"
    convert(tf1_ckpt, out, formats=["checkpoint"])
    before = tree_hash(out)
    real = os.rename

    def failing(a, b):
        if os.path.basename(str(a)).startswith(".out.tmp-"):
            raise OSError(28, "No space left on device", str(b))
        return real(a, b)

    monkeypatch.setattr(outdir.os, "rename", failing)
    code, _, err = run_cli(capsys, "convert", tf1_ckpt, out, "--force", "--formats", "checkpoint,onnx")
    assert_clean_error(code, err, "No space left on device")
    assert tree_hash(out) == before
    assert sorted(os.listdir(tmp_path)) == ["out", "src"]
