"""What a fuzz run of 336 cases found, each reproduced: a hang on a pipe in OUT, a full disk reported as an internal
error, bench timing a model that is not the one convert wrote, a GraphDef read as an empty SavedModel, a dashed name
with no hint, OUT inside a checkpoint's folder, a symbolic link out of OUT, messages of 500 characters."""
import errno
import json
import os
import resource
import signal
import subprocess
import sys

import pytest

from helpers import ROOT, SAMPLE, leftovers, one_short_line, refused, tree_hash
from crafted import copy_checkpoint
from cudnn_port import cli, convert

tf = pytest.importorskip("tensorflow")


def cli_process(*argv, limit=None, timeout=180):
    """The CLI in a subprocess (clean logging environment), optionally under a file size limit (ulimit -f) with
    SIGXFSZ ignored, so that a write past it fails with EFBIG as on a full disk: (exit code, stdout, stderr)."""
    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    proc = subprocess.run([sys.executable, "-m", "cudnn_port.cli", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, env=dict(env, PYTHONPATH=ROOT), cwd=ROOT,
                          preexec_fn=limited if limit else None)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "out"
    convert(SAMPLE, out, formats=["checkpoint", "onnx"])
    return out


@pytest.fixture
def out(tmp_path, converted):
    """A copy of the converted sample to damage."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(converted, copy)
    return copy


@pytest.mark.slow
@pytest.mark.parametrize("command", [["verify"], ["bench", "--steps", "2", "--repeat", "1"]])
def test_a_pipe_in_out_is_refused_not_read(out, command):
    """verify and bench hashed / loaded model.onnx, a FIFO here, and waited for a writer for ever."""
    os.remove(out / "model.onnx")
    os.mkfifo(out / "model.onnx")
    code, _, err = cli_process(command[0], out, *command[1:], "--quiet", timeout=120)
    assert code == 2, err
    assert "model.onnx is not a regular file" in one_short_line(err, out / "model.onnx")


@pytest.mark.slow
def test_a_file_size_limit_is_one_line_naming_the_disk(tmp_path):
    """TensorFlow's writer failing with EFBIG (as it fails with ENOSPC on a full disk) said "internal error", exit 1."""
    code, _, err = cli_process("convert", SAMPLE, tmp_path / "out", "--quiet", limit=100_000)
    assert code == 2, err
    line = one_short_line(err, tmp_path / "out", "/")
    assert "the disk mounted at" in line and "File too large" in line, line
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS])
def test_a_full_disk_while_writing_out_is_one_line(tmp_path, capsys, monkeypatch, code):
    """The last write of a convert (the manifest) fails as on a full, over-quota or read-only disk."""
    from cudnn_port.roads import stack

    def full(manifest, tmp):
        with open(os.path.join(tmp, "manifest.json"), "w"):
            raise OSError(code, os.strerror(code), os.path.join(tmp, "manifest.json"))

    monkeypatch.setattr(stack, "finish", full)
    line = refused(capsys, ["convert", SAMPLE, tmp_path / "out", "--formats", "checkpoint"], "the disk mounted at",
                   os.strerror(code), paths=["/"])
    assert str(tmp_path / "out") in line and not (tmp_path / "out").exists() and leftovers(tmp_path) == []


@pytest.mark.slow
def test_a_full_disk_while_verify_writes_its_report(out, capsys, monkeypatch):
    verify = sys.modules["cudnn_port.verify"]  # the package's verify is the function

    def full(path, report):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(verify, "write_report", full)
    refused(capsys, ["verify", out, "--quiet"], "the disk mounted at", "No space left", paths=["/"])


@pytest.mark.slow
def test_bench_checks_out_against_the_manifest(out, capsys):
    """Another valid ONNX model in model.onnx's place ended in "internal error: ValueError: Required inputs ...
    missing"; bench now checks every file's sha256 as verify does."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "other",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(out / "model.onnx"))
    refused(capsys, ["bench", out, "--steps", "2", "--repeat", "1"], "sha256 differs: model.onnx", "convert again")


def test_a_graphdef_named_saved_model_pb_is_refused(tmp_path, capsys):
    """protobuf reads a GraphDef's bytes as a SavedModel with an empty graph: inspect exited 0 and convert said the
    model "already runs on CPU"."""
    fn = tf.function(lambda x: tf.nn.relu(x * 2.0)).get_concrete_function(tf.TensorSpec([None, 3], tf.float32))
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(fn.graph.as_graph_def().SerializeToString())
    for argv in (["inspect", tmp_path / "sm"], ["convert", tmp_path / "sm", tmp_path / "out"]):
        refused(capsys, argv, "is a GraphDef", "not a SavedModel")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["convert", "-model.ckpt", "out"], ["inspect", "-model.ckpt"],
                                  ["verify", "-out"], ["convert", "train/model.ckpt", "-out"]])
def test_a_name_starting_with_a_dash_is_told_about_double_dash(capsys, argv):
    refused(capsys, argv, "goes after --")


def test_a_dashed_name_after_double_dash_is_a_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(capsys, ["convert", "--", "-model.ckpt", "out"], "checkpoint not found: -model.ckpt")


@pytest.mark.parametrize("name", ["model.ckpt", "model.ckpt.index", "."])
def test_out_inside_the_checkpoint_folder_is_refused_however_source_is_named(tmp_path, capsys, name):
    """It was refused only when SOURCE named the folder."""
    prefix = copy_checkpoint(SAMPLE, str(tmp_path / "ck"))
    before = tree_hash(tmp_path / "ck"), sorted(os.listdir(tmp_path / "ck"))
    source = os.path.join(os.path.dirname(prefix), name) if name != "." else os.path.dirname(prefix)
    refused(capsys, ["convert", source, tmp_path / "ck" / "out"], "lies inside the source folder",
            paths=(tmp_path / "ck" / "out", tmp_path / "ck"))
    assert (tree_hash(tmp_path / "ck"), sorted(os.listdir(tmp_path / "ck"))) == before


@pytest.mark.slow
def test_verify_fails_a_symbolic_link_out_of_out(out, tmp_path, capsys):
    """model.onnx replaced by a link to an identical file outside OUT passed every row."""
    outside = tmp_path / "elsewhere.onnx"
    os.rename(out / "model.onnx", outside)
    os.symlink(outside, out / "model.onnx")
    code = cli.main(["verify", str(out), "--json", "--quiet"])
    report = json.loads(capsys.readouterr().out)
    files = [row for row in report["rows"] if row["artifact"] == "files (sha256)"][0]
    assert code == 1 and not files["passed"] and "a symbolic link: model.onnx" in files["note"], files


def test_long_messages_are_cut_keeping_the_fix(tmp_path, capsys):
    """A variable name of 600 characters made a 700-character line; every line is at most about 300 characters
    besides the paths it quotes, and keeps its last clause, which says what to do."""
    code = cli.main(["convert", SAMPLE, str(tmp_path / "out"), "--variable", "v" * 600])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert len(err.strip().replace(SAMPLE, "")) <= 300 and "…" in err and "inspect lists them" in err, err
    assert cli.one_line("cudnn-port: error: " + "word " * 200 + "; do this").endswith("…; do this")


@pytest.mark.parametrize("depth", [1, 50, 399])
def test_a_long_path_is_not_cut(depth):
    path = "/" + "/".join(["folder"] * depth) + "/model.ckpt"
    message = f"cudnn-port: error: checkpoint not found: {path} (no model.ckpt.index); pass the prefix"
    assert cli.one_line(message) == message
