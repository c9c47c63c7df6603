"""Seeded mutations of the bundled checkpoint, a .keras model and a SavedModel (byte flips, truncations, crafted index
entries), each run through inspect and convert as users run them. Whatever the damage:

- no traceback and no internal error: exit 0 (a flip inside weight data can leave a valid input) or 2;
- exit 2 is one line of at most 200 characters besides the paths it quotes;
- nothing is written unless the exit is 0 (then OUT is whole: every file has its recorded sha256);
- the input is never modified.

Small enough for CI (about two minutes); ``CUDNN_PORT_FUZZ=N`` runs N times as many mutations per input.
"""
import os
import shutil
import zlib

import numpy as np
import pytest

from helpers import SAMPLE, make_spec, one_short_line, random_blob, save_raw_op_model, tree_hash
from crafted import copy_checkpoint, edit_entry, edit_header, flip_bytes, truncate
from cudnn_port import cli

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow  # seeded mutations, each run through inspect and convert
SCALE = int(os.environ.get("CUDNN_PORT_FUZZ", "1"))
BUFFER = "cudnn_lstm/opaque_kernel"


def checkpoint_mutations():
    """(id, function(prefix, rng)) for the TF1 sample."""
    data, index = ".data-00000-of-00001", ".index"
    found = [("index-truncated", lambda p, rng: truncate(p + index, rng)),
             ("data-truncated", lambda p, rng: truncate(p + data, rng)),
             ("data-emptied", lambda p, rng: open(p + data, "wb").close()),
             ("index-missing", lambda p, rng: os.remove(p + index)),
             ("entry-negative-dim", lambda p, rng: edit_entry(p, BUFFER, shape=[int(rng.integers(-9, 0))])),
             ("entry-dtype", lambda p, rng: edit_entry(p, BUFFER, dtype=int(rng.integers(100, 10000)))),
             ("entry-offset", lambda p, rng: edit_entry(p, BUFFER, offset=int(rng.integers(1 << 20, 1 << 40)))),
             ("entry-shard", lambda p, rng: edit_entry(p, "dense/kernel", shard=int(rng.integers(1, 99)))),
             ("entry-shape-size", lambda p, rng: edit_entry(p, BUFFER, shape=[int(rng.integers(1, 1 << 20))])),
             ("entry-unknown-rank", lambda p, rng: edit_entry(p, BUFFER, unknown=True)),
             ("header-shards", lambda p, rng: edit_header(p, 1, int(rng.integers(2, 1 << 20)))),
             ("header-endianness", lambda p, rng: edit_header(p, 2, 1)),
             # a known field of another wire type (a flipped bit in its key): bytes where a number belongs
             ("entry-shard-wire-type", lambda p, rng: edit_entry(p, BUFFER, shard=rng.bytes(2))),
             ("entry-dtype-wire-type", lambda p, rng: edit_entry(p, BUFFER, dtype=rng.bytes(1))),
             ("header-shards-wire-type", lambda p, rng: edit_header(p, 1, rng.bytes(1)))]
    for i in range(4 * SCALE):
        found.append((f"index-flip-{i}", lambda p, rng: flip_bytes(p + index, rng, int(rng.integers(1, 6)))))
        found.append((f"data-flip-{i}", lambda p, rng: flip_bytes(p + data, rng, int(rng.integers(1, 6)))))
    return found


def check_run(capsys, argv, out, inputs):
    before = tree_hash(inputs)
    code = cli.main([str(a) for a in argv] + ["--quiet"])
    _, err = capsys.readouterr()
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err and "internal error" not in err, err
    if code == 2:
        one_short_line(err, *[a for a in argv if os.sep in str(a)])
    if out is not None:
        if code == 0:
            from cudnn_port.manifest import load_manifest
            from cudnn_port.verify import file_rows

            assert file_rows(str(out), load_manifest(out))[0]["passed"]
        else:
            assert not os.path.exists(out)
        assert not [n for n in os.listdir(os.path.dirname(out)) if n.startswith(".")]
    assert tree_hash(inputs) == before, "the input was modified"
    return code


@pytest.mark.parametrize("name,mutate", checkpoint_mutations(), ids=[m[0] for m in checkpoint_mutations()])
def test_mutated_checkpoint(tmp_path, capsys, name, mutate):
    rng = np.random.default_rng(zlib.crc32(name.encode()))  # the same mutation in every run (hash() is salted)
    prefix = copy_checkpoint(SAMPLE, str(tmp_path / "src"))
    mutate(prefix, rng)
    check_run(capsys, ["inspect", prefix], None, tmp_path / "src")
    check_run(capsys, ["convert", prefix, tmp_path / "out", "--formats", "checkpoint,onnx"], tmp_path / "out",
              tmp_path / "src")


@pytest.fixture(scope="module")
def keras_file(tmp_path_factory):
    import keras

    from cudnn_port.layers import CudnnLSTM

    keras.utils.set_random_seed(2)
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, keras.layers.Dense(2)(CudnnLSTM(4, return_sequences=True)(inputs)))
    path = tmp_path_factory.mktemp("keras") / "model.keras"
    model.save(path)
    return path


@pytest.mark.parametrize("kind,index", [(k, i) for k in ("flip", "truncate") for i in range(2 * SCALE)])
def test_mutated_keras_file(tmp_path, capsys, keras_file, kind, index):
    rng = np.random.default_rng(100 + index)
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "model.keras"
    shutil.copy(keras_file, path)
    flip_bytes(path, rng, int(rng.integers(1, 9))) if kind == "flip" else truncate(path, rng)
    check_run(capsys, ["convert", path, tmp_path / "out"], tmp_path / "out", tmp_path / "src")


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    spec = make_spec("gru", 1, False)
    return save_raw_op_model(tmp_path_factory.mktemp("sm") / "sm", spec, random_blob(spec), op="CudnnRNNV2",
                             as_variable=True)


@pytest.mark.parametrize("target,index", [(t, i) for t in ("saved_model.pb", "variables") for i in range(2 * SCALE)])
def test_mutated_saved_model(tmp_path, capsys, saved_model, target, index):
    rng = np.random.default_rng(200 + index)
    source = tmp_path / "src" / "sm"
    shutil.copytree(saved_model, source)
    if target == "variables":
        data = [f for f in os.listdir(source / "variables") if ".data-" in f][0]
        (flip_bytes if index % 2 else lambda p, r, n: truncate(p, r))(source / "variables" / data, rng, 3)
    else:
        flip_bytes(source / target, rng, int(rng.integers(1, 6))) if index % 2 else truncate(source / target, rng)
    check_run(capsys, ["inspect", source], None, tmp_path / "src")
    check_run(capsys, ["convert", source, tmp_path / "out"], tmp_path / "out", tmp_path / "src")
