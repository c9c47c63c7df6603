"""OUT as a download: --force replaces only an unchanged earlier output, verify never writes through a planted link,
a truncated or bit-flipped artifact is checked before any runtime parses it (100 of each, never a crash); and the
fuzz run's smaller findings (int8 files announced but never written, nothing to quantize refused late, a NaN named by
a synthesised buffer, mixed cells called missing, an ambiguous FAILED line)."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from helpers import ROOT, tagger, tree_hash
from crafted import refused
from cudnn_port import cli

tf = pytest.importorskip("tensorflow")
SAMPLE = os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt")
WEIGHTS = os.path.join(ROOT, "tests", "fixtures", "keras2_cudnn_weights.h5")


# --------------------------------------------------------------------------------------------------- OUT
@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "out"
    assert cli.main(["convert", SAMPLE, str(out), "--quiet", "--formats", "checkpoint,onnx,tflite"]) == 0
    return out


@pytest.fixture
def earlier(tmp_path, converted):
    shutil.copytree(converted, tmp_path / "out", symlinks=True)
    return tmp_path / "out"


@pytest.mark.parametrize("change", ["added", "edited", "stub manifest", "link"])
def test_force_replaces_only_an_unchanged_earlier_output(tmp_path, capsys, earlier, change):
    """--force deleted serve.py and data/ a user had added, and paper.tex beside a {"tool": "cudnn-port"} stub."""
    if change == "added":
        (earlier / "data").mkdir()
        (earlier / "data" / "train.txt").write_text("mine")
        (earlier / "serve.py").write_text("mine")
        needles = ["serve.py", "data/train.txt"]
    elif change == "edited":
        (earlier / "model.onnx").write_bytes(b"mine")
        needles = ["model.onnx (changed"]
    elif change == "stub manifest":
        shutil.rmtree(earlier)
        earlier.mkdir()
        (earlier / "manifest.json").write_text('{"tool": "cudnn-port"}')
        (earlier / "paper.tex").write_text("mine")
        needles = ["not a cudnn-port output"]
    else:
        (tmp_path / "bashrc").write_text("mine")
        os.symlink(tmp_path / "bashrc", earlier / "notes")
        needles = ["symbolic links (notes)"]
    before = tree_hash(earlier), sorted(os.listdir(earlier))
    refused(capsys, "convert", SAMPLE, earlier, "--force", "--formats", "checkpoint", needles=needles)
    assert (tree_hash(earlier), sorted(os.listdir(earlier))) == before
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []


def test_verify_never_writes_its_report_through_a_planted_link(tmp_path, capsys, earlier):
    bashrc = tmp_path / "bashrc"
    bashrc.write_text("mine")
    os.symlink(bashrc, earlier / "parity.json.tmp")
    os.symlink(bashrc, earlier / "parity.json")
    cli.main(["verify", str(earlier), "--quiet"])
    capsys.readouterr()
    assert bashrc.read_text() == "mine"
    assert not os.path.islink(earlier / "parity.json") and json.loads((earlier / "parity.json").read_text())["rows"]


# ------------------------------------------------------------------------------------- damaged artifacts
MUTATE = """
    import os, sys, numpy as np
    from cudnn_port.formats import jobs
    from cudnn_port.exports.artifact_check import check_artifact
    from cudnn_port.errors import CudnnPortError
    from cudnn_port.judging.parity import sample_batch
    from cudnn_port.layout import RNNSpec
    path, key, runtime, spec = sys.argv[1], sys.argv[2], sys.argv[3], RNNSpec(**eval(sys.argv[4]))
    data, rng, counts = open(path, "rb").read(), np.random.default_rng(38), {"refused": 0, "ran": 0}
    for i in range(100):
        damaged = bytearray(data[:int(rng.integers(0, len(data)))] if i % 2 else data)
        for at in rng.integers(0, len(data), size=0 if i % 2 else 3):
            damaged[at] ^= 1 << int(rng.integers(0, 8))
        copy = os.path.join(os.path.dirname(path), f"damaged{i}" + os.path.splitext(path)[1])
        open(copy, "wb").write(damaged)
        try:
            check_artifact(copy)
        except CudnnPortError:
            counts["refused"] += 1
            continue
        try:
            x, lengths, h, c = sample_batch(spec, 2, 5, 0)
            jobs.open_artifact(key, copy, spec, runtime)({"inputs": x, "sequence_lengths": lengths})
        except Exception:
            pass  # an error is a failed row; only a crash would end this process
        counts["ran"] += 1
    print(counts)
"""


@pytest.mark.slow
@pytest.mark.parametrize("key,runtime", [("tflite", "tf.lite"), ("onnx", "onnxruntime")])
def test_100_truncated_or_bit_flipped_artifacts_never_crash_a_runtime(tmp_path, converted, key, runtime):
    """A truncated model.tflite crashed verify --json with SIGSEGV (in tf.lite's interpreter, every time here)."""
    stack = json.loads((converted / "manifest.json").read_text())["stacks"][0]
    shutil.copy(converted / stack["artifacts"][key], tmp_path)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(MUTATE), str(tmp_path / stack["artifacts"][key]),
                           key, runtime, repr(stack["spec"])], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    counts = eval(proc.stdout.strip().splitlines()[-1])
    assert counts["refused"] >= 45, counts  # truncations, and flips that land on structure


def test_verify_and_bench_fail_a_truncated_tflite_in_one_line(tmp_path, earlier, capsys):
    path = earlier / "model.tflite"
    path.write_bytes(path.read_bytes()[:1000])
    code = cli.main(["verify", str(earlier), "--json", "--quiet"])
    out, err = capsys.readouterr()
    report = json.loads(out)
    rows = [r for r in report["rows"] if r["artifact"] in ("tflite (litert)", "tflite (tf.lite)")]
    assert code == 1 and len(rows) == 2 and all(not r["passed"] and "damaged" in r["note"] for r in rows), rows
    assert len(err.strip().splitlines()) == 1
    manifest = json.loads((earlier / "manifest.json").read_text())
    from cudnn_port.paths import sha256

    manifest["files"]["model.tflite"] = sha256(path)  # re-recorded: bench's file check passes
    (earlier / "manifest.json").write_text(json.dumps(manifest))
    refused(capsys, "bench", earlier, "--steps", "2", "--repeat", "1", "--quiet", needles=["model.tflite is damaged"])


# ----------------------------------------------------------------------------------------- smaller ones
def _cells(tmp_path, cells):
    """A checkpoint holding only canonical TF1 cells: {cell index: (kind, NaN?)}; input 4, hidden 3."""
    from cudnn_port.checkpoint import write_checkpoint

    rng, items, I, H = np.random.default_rng(0), [], 4, 3
    for index, (kind, nan) in cells.items():
        scope = f"rnn/multi_rnn_cell/cell_{index}/cudnn_compatible_{kind}_cell"
        width = I if index == 0 else H
        shapes = {"kernel": (width + H, 4 * H), "bias": (4 * H,)} if kind == "lstm" else {
            "gates/kernel": (width + H, 2 * H), "gates/bias": (2 * H,), "candidate/input_projection/kernel": (width, H),
            "candidate/input_projection/bias": (H,), "candidate/hidden_projection/kernel": (H, H),
            "candidate/hidden_projection/bias": (H,)}
        for name, shape in shapes.items():
            value = rng.normal(size=shape).astype("f4")
            if nan and name.endswith("kernel"):
                value[0, 0] = np.nan
                nan = False
            items.append((f"{scope}/{name}", value, "float32"))
    return write_checkpoint(str(tmp_path / "ck"), items)


def test_a_nan_in_canonical_cells_names_the_users_tensor(tmp_path, capsys):
    prefix = _cells(tmp_path, {0: ("gru", False), 1: ("gru", True)})
    line = refused(capsys, "convert", prefix, tmp_path / "out")
    assert "rnn/multi_rnn_cell/cell_1/cudnn_compatible_gru_cell/gates/kernel holds 1 NaN" in line, line
    assert "opaque_kernel" not in line


def test_mixed_lstm_and_gru_cells_are_called_mixed_not_missing(tmp_path, capsys):
    prefix = _cells(tmp_path, {0: ("lstm", False), 1: ("gru", False)})
    line = refused(capsys, "inspect", prefix, needles=["mix cudnn_compatible_gru_cell and cudnn_compatible_lstm_cell"])
    assert "missing" not in line


def test_quantize_with_nothing_to_quantize_is_refused_before_converting(tmp_path, capsys, monkeypatch):
    from cudnn_port.roads import stack

    monkeypatch.setattr(stack, "write_stacks", lambda *a, **k: pytest.fail("converted before refusing"))
    prefix = _cells(tmp_path, {0: ("gru", False)})
    refused(capsys, "convert", prefix, tmp_path / "out", "--quantize", "int8", needles=["nothing to quantize"])


def test_quantize_of_a_keras_model_with_nothing_to_quantize_is_refused_before_exporting(tmp_path, monkeypatch):
    """The whole-model road too: a model whose only recurrent layer is a GRU has no int8 form, said before any
    artifact is traced or written."""
    from cudnn_port.roads import model as model_export
    from cudnn_port.errors import CudnnPortError

    monkeypatch.setattr(model_export, "write_stacks", lambda *a, **k: pytest.fail("exported before refusing"))
    with pytest.raises(CudnnPortError, match="nothing to quantize"):
        model_export.export(tagger(stacks=(("decoder", "gru", 1, False),)), tmp_path / "out", quantize="int8")
    assert not (tmp_path / "out").exists()


def test_quantize_says_only_the_int8_files_it_wrote(tmp_path, capsys):
    """A mixed LSTM + GRU source printed "writing ..._gru_int8.onnx" for files never written."""
    out = tmp_path / "out"
    assert cli.main(["convert", WEIGHTS, str(out), "--formats", "checkpoint,onnx", "--quantize", "int8"]) == 0
    said = [line.split()[1] for line in capsys.readouterr().err.splitlines() if line.endswith("(int8)")]
    assert said and all((out / rel).is_file() for rel in said) and not any("gru" in rel for rel in said), said


def test_verify_joins_failed_row_names_unambiguously():
    from cudnn_port.cli_text import failed_rows

    rows = [{"artifact": "onnx (onnxruntime, fed states)", "stack": "a", "passed": False},
            {"artifact": "keras", "stack": "b", "passed": False}]
    assert failed_rows({"rows": rows}) == \
        "2 of 2 rows failed: onnx (onnxruntime, fed states) (a); keras (b)"
