"""A model file is data: each crafted source file of issue 38 outside SavedModel graphs, built here (h5py, zipfile,
TF), is one line and exit 2, nothing is written outside OUT, no secret reaches OUT, the input is untouched, and a
memory bomb stays below twice a normal run's peak memory."""
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

from helpers import ROOT, tree_hash
from crafted import copy_checkpoint, edit_entry, refused

h5py = pytest.importorskip("h5py")
tf = pytest.importorskip("tensorflow")
SAMPLE = os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt")
WEIGHTS = os.path.join(ROOT, "tests", "fixtures", "keras2_cudnn_weights.h5")
SAVED_MODELS = os.path.join(ROOT, "tests", "fixtures", "tf_keras_saved_models.tar.xz")
HEAD = "head/head/kernel:0"  # a [3, 2] float32 weight of the fixture's dense layer: carried over into OUT
SECRET = b"HF_TOKEN=hf_0123456789abc"[:24]  # 24 bytes: exactly the weight's size


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
    """The CLI in a child process, measured: (exit code, stderr, its peak RSS in KiB); exit code 124 where it ran
    past ``timeout`` seconds (the CLI is then killed)."""
    probe = textwrap.dedent("""
        import resource, subprocess, sys
        try:
            p = subprocess.run([sys.executable, "-m", "cudnn_port.cli", *sys.argv[2:]], capture_output=True,
                               text=True, timeout=float(sys.argv[1]))
            code, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired:
            code, err = 124, "timed out"
        print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
        sys.stderr.write(err)
    """)
    proc = subprocess.run([sys.executable, "-c", probe, str(timeout), *map(str, argv)], capture_output=True,
                          text=True, timeout=timeout + 30, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    code, rss = map(int, proc.stdout.split())
    return code, proc.stderr, rss


# ------------------------------------------------------------------------------------------------ HDF5
def test_a_chunked_h5_dataset_with_no_chunk_written_is_refused_and_stays_small(tmp_path):
    """17 KB of .h5 whose chunked datasets store nothing took inspect to 2.1 GB."""
    bomb = with_weight(tmp_path, lambda g, n: g.create_dataset(n, shape=(1 << 15, 1 << 14), dtype="f4",
                                                                chunks=(64, 64)))
    assert os.path.getsize(bomb) < 64 << 10
    code, err, rss = run_child("inspect", bomb)
    assert code == 2 and f"{HEAD} declares 2147483648 bytes but stores 0" in err, err
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
    line = refused(capsys, "convert", source, tmp_path / "out", needles=[HEAD, "file itself"])
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


def _lying_model(tmp_path, suffix):
    """A model saved with model.save (TimeDistributed(LSTM(6)) -> Bidirectional(GRU(5)) -> Dense), whose
    TimeDistributed LSTM's config then declares units 8192 while its weights stay those of 6 units: a 36 KB
    .keras took inspect past 180 s and 4.4 GiB while Keras built (and orthogonally initialised) that layer."""
    keras = pytest.importorskip("keras")

    L = keras.layers
    x = keras.Input((3, 5, 4))
    model = keras.Model(x, L.Dense(2)(L.Bidirectional(L.GRU(5))(L.TimeDistributed(L.LSTM(6, name="inner"))(x))))
    honest = tmp_path / f"honest{suffix}"
    model.save(honest)

    def lie(node):
        if isinstance(node, dict):
            if node.get("class_name") == "LSTM":
                node["config"]["units"] = 8192
            for value in node.values():
                lie(value)
        elif isinstance(node, list):
            for value in node:
                lie(value)

    path = tmp_path / f"lying{suffix}"
    if suffix == ".keras":
        with zipfile.ZipFile(honest) as source, zipfile.ZipFile(path, "w") as copy:
            config = json.loads(source.read("config.json"))
            lie(config)
            for info in source.infolist():
                copy.writestr(info, json.dumps(config) if info.filename == "config.json" else source.read(info))
    else:
        shutil.copy(honest, path)
        with h5py.File(path, "r+") as f:
            config = json.loads(f.attrs["model_config"])
            lie(config)
            f.attrs["model_config"] = json.dumps(config)
    return honest, path


@pytest.mark.parametrize("suffix", [".keras", ".h5"])
def test_a_model_whose_config_declares_far_more_than_its_weights_is_refused_before_keras_builds_it(tmp_path,
                                                                                                  suffix):
    """Refused in one line, within seconds and without TensorFlow's memory (under 512 MiB at its peak: Keras
    alone takes more), naming the layer; the honest file's sizes pass the same check."""
    from cudnn_port.readers.config_sizes import check_config_sizes
    from cudnn_port.readers.h5_guard import check_h5
    from cudnn_port.readers.zip_guard import check_keras_zip

    honest, lying = _lying_model(tmp_path, suffix)
    code, err, rss = run_child("inspect", lying, timeout=60)
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, err)
    assert "LSTM 'inner' alone 268435456" in err and "crafted to exhaust memory" in err, err
    assert rss < 512 << 10, rss
    if suffix == ".keras":
        check_keras_zip(str(honest))
    else:
        with h5py.File(honest, "r") as f:
            check_config_sizes(f.attrs["model_config"], check_h5(f, str(honest)), str(honest), "the file")


# ------------------------------------------------------------------------------------------- checkpoints
@pytest.mark.slow
def test_a_string_entry_declaring_2_26_elements_in_16_bytes_is_refused_and_stays_small(tmp_path):
    """It took convert to 2.2 GB before its clean exit 2."""
    prefix = copy_checkpoint(SAMPLE, str(tmp_path / "ck"))
    edit_entry(prefix, "global_step", dtype=7, shape=[1 << 26], offset=0, size=16)
    code, err, rss = run_child("convert", prefix, tmp_path / "out", "--quiet")
    assert code == 2 and "global_step declares 67108864 elements in 16 bytes" in err, err
    normal_code, _, normal_rss = run_child("inspect", SAMPLE)
    assert normal_code == 0 and rss < 2 * normal_rss and not (tmp_path / "out").exists(), (rss, normal_rss)


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
