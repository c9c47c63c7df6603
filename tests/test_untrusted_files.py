"""A model file is data: each crafted case of issue 38 outside SavedModel graphs, built here (h5py, zipfile, TF), is
one line and exit 2 (verify: a failed row), nothing is written outside OUT, no secret reaches OUT, the input is
untouched, and a memory bomb stays small."""
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile

import numpy as np
import pytest

from conftest import ROOT, tree_hash
from crafted import copy_checkpoint, edit_entry
from cudnn_port import cli

h5py = pytest.importorskip("h5py")
tf = pytest.importorskip("tensorflow")
SAMPLE = os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt")
WEIGHTS = os.path.join(ROOT, "tests", "fixtures", "keras2_cudnn_weights.h5")
SAVED_MODELS = os.path.join(ROOT, "tests", "fixtures", "tf_keras_saved_models.tar.xz")
HEAD = "head/head/kernel:0"  # a [3, 2] float32 weight of the fixture's dense layer: carried over into OUT
SECRET = b"HF_TOKEN=hf_0123456789abc"[:24]  # 24 bytes: exactly the weight's size


def refused(capsys, *argv, needles=()):
    """The CLI in this process (without progress lines): exit 2 and one line (returned) holding every needle."""
    argv = [str(a) for a in argv] + (["--quiet"] if argv[0] != "inspect" and "--quiet" not in argv else [])
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("cudnn-port: error: "), (code, err)
    for needle in needles:
        assert needle in err, err
    return err


def holds_secret(folder):
    return [os.path.join(r, f) for r, _, fs in os.walk(folder) for f in fs
            if not os.path.islink(os.path.join(r, f)) and SECRET in open(os.path.join(r, f), "rb").read()]


def with_weight(tmp_path, make):
    """A copy of the Keras 2 weights fixture whose dense kernel ``HEAD`` is replaced by ``make(group, name)``."""
    path = tmp_path / "src" / "weights.h5"
    path.parent.mkdir()
    shutil.copy(WEIGHTS, path)
    with h5py.File(path, "r+") as f:
        group, name = f["head/head"], "kernel:0"
        del group[name]
        make(group, name)
    return path


def run_child(*argv, timeout=300):
    """The CLI in a child process, measured: (exit code, stderr, its peak RSS in KiB)."""
    probe = textwrap.dedent("""
        import resource, subprocess, sys
        p = subprocess.run([sys.executable, "-m", "cudnn_port.cli", *sys.argv[1:]], capture_output=True, text=True)
        print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        sys.stderr.write(p.stderr)
    """)
    proc = subprocess.run([sys.executable, "-c", probe, *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    code, rss = map(int, proc.stdout.split())
    return code, proc.stderr, rss


# ------------------------------------------------------------------------------------------------ HDF5
def test_a_chunked_h5_dataset_with_no_chunk_written_is_refused_and_stays_small(tmp_path):
    """17 KB of .h5 whose chunked datasets store nothing took inspect to 2.1 GB."""
    bomb = with_weight(tmp_path, lambda g, n: g.create_dataset(n, shape=(1 << 15, 1 << 14), dtype="f4",
                                                                chunks=(64, 64)))
    assert os.path.getsize(bomb) < 64 << 10
    code, err, rss = run_child("inspect", bomb)
    assert code == 2 and "head/head/kernel:0 declares 2147483648 bytes but stores 0" in err, err
    normal_code, _, normal_rss = run_child("inspect", WEIGHTS)
    assert normal_code == 0 and rss < 2 * normal_rss, (rss, normal_rss)


def _external(secret):
    return lambda g, n: g.create_dataset(n, shape=(3, 2), dtype="f4", external=[(str(secret), 0, 24)])


def _other_file(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f.create_dataset("k", data=np.frombuffer(SECRET, "f4").reshape(3, 2))
    return other


CASES = {
    "external storage": lambda tmp, secret: _external(secret),
    "external link": lambda tmp, secret: lambda g, n: g.__setitem__(n, h5py.ExternalLink(str(_other_file(tmp)), "k")),
    "soft link": lambda tmp, secret: lambda g, n: g.__setitem__(n, h5py.SoftLink("/embedding/embedding/embeddings:0")),
    "virtual": lambda tmp, secret: lambda g, n: g.create_virtual_dataset(n, _virtual(_other_file(tmp))),
}


def _virtual(other):
    layout = h5py.VirtualLayout(shape=(3, 2), dtype="f4")
    layout[:] = h5py.VirtualSource(str(other), "k", shape=(3, 2))
    return layout


@pytest.mark.parametrize("case", sorted(CASES))
def test_h5_data_from_outside_the_file_never_reaches_out(tmp_path, capsys, case):
    """A weight stored as an external dataset on /proc/self/environ (here a stand-in holding a token) was copied
    into OUT/checkpoint and verify PASSED; external links and virtual datasets leaked another file the same way."""
    secret = tmp_path / "environ"
    secret.write_bytes(SECRET)
    source = with_weight(tmp_path, CASES[case](tmp_path, secret))
    before = tree_hash(source.parent)
    line = refused(capsys, "convert", source, tmp_path / "out", needles=["head/head/kernel:0", "file itself"])
    assert case.split()[0] in line or "outside file" in line
    assert not (tmp_path / "out").exists() and holds_secret(tmp_path / "src") == []
    assert tree_hash(source.parent) == before


def test_an_external_h5_dataset_on_a_fifo_does_not_hang(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    source = with_weight(tmp_path, _external(fifo))
    code, err, _ = run_child("inspect", source, timeout=120)
    assert code == 2 and "stored in an outside file" in err, err


# -------------------------------------------------------------------------------------------- .keras zip
def test_a_keras_file_whose_config_inflates_to_80_mib_is_refused_unread(tmp_path, capsys):
    path = tmp_path / "model.keras"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("metadata.json", "{}")
        with archive.open("config.json", "w", force_zip64=True) as member:
            for _ in range(80):
                member.write(b" " * (1 << 20))
    assert os.path.getsize(path) < 1 << 20
    refused(capsys, "inspect", path, needles=["config.json inflates to 83886080 bytes"])


def test_a_keras_file_whose_weights_link_outside_is_refused(tmp_path, capsys):
    inner = tmp_path / "inner.h5"
    with h5py.File(inner, "w") as f:
        f["layers/x"] = h5py.ExternalLink(str(_other_file(tmp_path)), "k")
    path = tmp_path / "model.keras"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("config.json", "{}")
        archive.write(inner, "model.weights.h5")
    refused(capsys, "inspect", path, needles=["model.weights.h5", "/layers/x is an external link"])


# ------------------------------------------------------------------------------------------- checkpoints
def test_a_string_entry_declaring_2_26_elements_in_16_bytes_is_refused(tmp_path, capsys):
    """It took convert to 2.2 GB before its clean exit 2."""
    prefix = copy_checkpoint(SAMPLE, str(tmp_path / "ck"))
    edit_entry(prefix, "global_step", dtype=7, shape=[1 << 26], offset=0, size=16)
    refused(capsys, "inspect", prefix, needles=["global_step declares 67108864 elements in 16 bytes"])


@pytest.mark.parametrize("target", ["absolute", "relative"])
def test_a_checkpoint_state_file_pointing_outside_the_folder_is_refused(tmp_path, capsys, target):
    outside = copy_checkpoint(SAMPLE, str(tmp_path / "elsewhere"))
    folder = tmp_path / "a" / "b"
    folder.mkdir(parents=True)
    path = outside if target == "absolute" else os.path.relpath(outside, folder)
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "{path}"\n')
    refused(capsys, "convert", folder, tmp_path / "out", needles=["outside", "pass that checkpoint prefix"])
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_file_linked_from_outside_its_folder_is_refused(tmp_path, capsys):
    prefix = copy_checkpoint(SAMPLE, str(tmp_path / "ck"))
    data = prefix + ".data-00000-of-00001"
    os.rename(data, tmp_path / "data")
    os.symlink(tmp_path / "data", data)
    refused(capsys, "convert", prefix, tmp_path / "out", needles=["symbolic link", "cp -L"])


@pytest.fixture
def saved_model(tmp_path):
    with tarfile.open(SAVED_MODELS) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith("tf_keras_saved_models/lstm/")]
        archive.extractall(tmp_path, members=members)
    return tmp_path / "tf_keras_saved_models" / "lstm"


@pytest.mark.parametrize("link", ["file", "folder"])
def test_links_out_of_a_saved_model_folder_are_refused_never_copied(tmp_path, capsys, saved_model, link):
    """assets/ holding a link to a file and one to a folder (~) got both copied into OUT/saved_model/assets/."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_bytes(SECRET)
    (saved_model / "assets").mkdir(exist_ok=True)
    os.symlink(home / ".bashrc" if link == "file" else home, saved_model / "assets" / "vocab")
    refused(capsys, "convert", saved_model, tmp_path / "out", needles=["assets/vocab", "symbolic link"])
    assert not (tmp_path / "out").exists() and holds_secret(tmp_path) == [str(home / ".bashrc")]


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
    from cudnn_port import formats
    from cudnn_port.artifact_check import check_artifact
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
            formats.open_artifact(key, copy, spec, runtime)({"inputs": x, "sequence_lengths": lengths})
        except Exception:
            pass  # an error is a failed row; only a crash would end this process
        counts["ran"] += 1
    print(counts)
"""


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
    from cudnn_port import converter

    monkeypatch.setattr(converter, "write_stacks", lambda *a, **k: pytest.fail("converted before refusing"))
    prefix = _cells(tmp_path, {0: ("gru", False)})
    refused(capsys, "convert", prefix, tmp_path / "out", "--quantize", "int8", needles=["nothing to quantize"])


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
