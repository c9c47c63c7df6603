"""stderr carries only cudnn-port's own lines: every command, each source kind, good and bad input, run as a user
runs it (a subprocess whose environment sets none of TensorFlow's logging variables; conftest.py sets them for the
rest of the suite, which is why in-process tests never saw TensorFlow's log lines). A success under --quiet prints
nothing on stderr; a failure prints exactly one line (and with --json, one JSON object on stdout)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

import pytest

from helpers import CHAR_LM, ROOT, SAMPLE

pytest.importorskip("tensorflow")
pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.slow  # each case runs the CLI in a fresh process that imports TensorFlow
H5 = os.path.join(ROOT, "tests", "fixtures", "keras2_cudnn_model.h5")
ARCHIVE = os.path.join(ROOT, "tests", "fixtures", "tf_keras_saved_models.tar.xz")
# what TensorFlow, absl, oneDNN, XLA, grappler, onnxruntime, tf2onnx and Python's warnings print (TF 2.16-2.21)
FOREIGN = re.compile(r"^[IWEF]\d{4} |^\d{4}-\d\d-\d\d[ T]|absl|oneDNN|onnxruntime|cpu_feature_guard|"
                     r"rebuild TensorFlow|tensorflow/|XLA|grappler|single_machine|tf2onnx|Warning:|WARNING|"
                     r"Traceback|\x1b\[")


def environment(**env):
    """os.environ without TensorFlow's logging variables or ours (plus ``env``), the worktree's cudnn_port first."""
    clean = {k: v for k, v in os.environ.items() if k not in
             ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS", "CUDNN_PORT_VERBOSE", "CUDNN_PORT_DEBUG")}
    return dict(clean, PYTHONPATH=ROOT, **env)


def cli(*argv, **env):
    """``python -m cudnn_port.cli ARGV`` with a clean environment (plus ``env``): (exit code, stdout, stderr)."""
    return cli_all((argv, env))[0]


def cli_all(*runs, timeout=300):
    """Several (argv, env) runs of the CLI at once (each imports TensorFlow: seconds), in a clean environment."""
    procs = [subprocess.Popen([sys.executable, "-m", "cudnn_port.cli", *map(str, argv)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=environment(**env), cwd=ROOT)
             for argv, env in runs]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        results.append((proc.returncode, out, err))
    return results


def clean_success(result, quiet=True):
    code, out, err = result
    assert code == 0, err
    if quiet:
        assert err == "", err
    else:
        assert err.strip() and not [line for line in err.splitlines() if FOREIGN.search(line)], err
    return out


def one_line(result, code=2, json_out=False):
    """Exactly one stderr line, ours; with --json exactly one JSON object on stdout that says the same."""
    got, out, err = result
    assert got == code, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cudnn-port: "), err
    if json_out:
        assert json.loads(out)["error"] == lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The TF1 sample converted once, progress on (its progress lines are ours, none foreign)."""
    out = tmp_path_factory.mktemp("ckpt") / "out"
    clean_success(cli("convert", SAMPLE, out), quiet=False)
    return out


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """A tf_keras SavedModel of a trained LSTM (tests/test_tf_keras_saved_models.py)."""
    root = tmp_path_factory.mktemp("tf_keras")
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(root, members=[m for m in archive.getmembers() if "/lstm" in m.name or m.isdir()],
                           filter="data")
    return root / "tf_keras_saved_models" / "lstm"


def test_checkpoint_verify_bench_and_inspect_are_quiet(converted):
    for result in cli_all((["inspect", SAMPLE], {}), (["verify", converted, "--quiet"], {}),
                          (["bench", converted, "--steps", "2", "--repeat", "1", "--quiet"], {})):
        clean_success(result)


def test_keras_model_is_quiet(tmp_path):
    for result in cli_all((["inspect", CHAR_LM], {}), (["convert", CHAR_LM, tmp_path / "out", "--quiet"], {})):
        clean_success(result)


def test_keras2_h5_is_quiet(tmp_path):
    for result in cli_all((["inspect", H5], {}), (["convert", H5, tmp_path / "out", "--formats", "keras,onnx",
                                                   "--quiet"], {})):
        clean_success(result)


def test_tf_keras_saved_model_is_quiet(tmp_path, saved_model):
    for result in cli_all((["inspect", saved_model], {}), (["convert", saved_model, tmp_path / "out", "--quiet"], {})):
        clean_success(result)
    clean_success(cli("verify", tmp_path / "out", "--quiet"))


def test_the_filter_hides_what_onednn_says_when_it_is_on_and_verbose_shows_it(saved_model):
    """With oneDNN's custom ops on (TF_ENABLE_ONEDNN_OPTS=1), TensorFlow 2.21 logs "oneDNN custom operations are
    on" whatever TF_CPP_MIN_LOG_LEVEL says (TensorFlow 2.16 logs it at level I, which level 2 hides): the fd 2
    filter removes it, and --verbose or CUDNN_PORT_VERBOSE=1 lets it and the rest through."""
    on = dict(TF_ENABLE_ONEDNN_OPTS="1")
    quiet, *loud = cli_all((["inspect", saved_model], on), (["inspect", saved_model, "--verbose"], on),
                           (["inspect", saved_model], dict(on, CUDNN_PORT_VERBOSE="1")))
    clean_success(quiet)
    for code, _, err in loud:
        assert code == 0 and [line for line in err.splitlines() if FOREIGN.search(line)], err


@pytest.mark.parametrize("json_out", [False, True])
def test_a_missing_checkpoint_is_one_line(tmp_path, json_out):
    """The command of the pre-stop check: converter.py's require() imported TensorFlow before its logging was set
    (7 stderr lines, 5 of them TensorFlow's); now the path is checked before any heavy import."""
    line = one_line(cli("convert", "missing/model.ckpt", tmp_path / "out", *(["--json"] if json_out else [])),
                    json_out=json_out)
    assert "checkpoint not found" in line and not (tmp_path / "out").exists()


def test_bad_inputs_of_each_kind_are_one_line(tmp_path, saved_model):
    """Each fails after TensorFlow (or h5py) was imported."""
    (tmp_path / "empty.keras").write_bytes(b"")
    with open(H5, "rb") as f:
        (tmp_path / "cut.h5").write_bytes(f.read()[:3000])
    broken = tmp_path / "sm"
    shutil.copytree(saved_model, broken)
    shutil.rmtree(broken / "variables")
    keras, h5, sm, ckpt = cli_all((["convert", tmp_path / "empty.keras", tmp_path / "out"], {}),
                                  (["inspect", tmp_path / "cut.h5", "--json"], {}),
                                  (["convert", broken, tmp_path / "out"], {}),
                                  (["convert", SAMPLE, tmp_path, "--json"], {}))
    assert "not a zip archive" in one_line(keras)
    one_line(h5, json_out=True)
    assert "variables/ is missing" in one_line(sm)
    assert "not empty" in one_line(ckpt, json_out=True)
    assert not (tmp_path / "out").exists()


def test_verify_and_bench_failures_are_one_line(tmp_path, converted):
    tampered = tmp_path / "tampered"
    shutil.copytree(converted, tampered)
    with open(tampered / "model.onnx", "r+b") as f:
        f.seek(-64, os.SEEK_END)
        f.write(bytes(64))  # inside the last initializer's weights: the file still loads, its numbers change
    (tmp_path / "empty").mkdir()
    verify_empty, bench_empty, verify_tampered, bench_tampered = cli_all(
        (["verify", tmp_path / "empty", "--json"], {}), (["bench", tmp_path / "empty"], {}),
        (["verify", tampered, "--quiet"], {}), (["bench", tampered, "--steps", "2", "--repeat", "1"], {}))
    one_line(verify_empty, json_out=True)
    one_line(bench_empty)
    assert "verify FAILED" in one_line(verify_tampered, code=1)
    assert "model.onnx" in one_line(bench_tampered)


def test_the_filter_at_the_file_descriptor():
    """What C++ writes to fd 2 while convert runs, in the formats of TensorFlow 2.16 and 2.21, absl, onnxruntime
    and Python's logging: only our lines come through; a fatal line, after which the process aborts, comes through
    as one line of ours."""
    script = r"""
import os, sys
from cudnn_port.quiet import quiet_stderr
with quiet_stderr():
    for line in [
        b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        b"I0000 00:00:1795465174.378685    5858 port.cc:153] oneDNN custom operations are on.",
        b"I0000 00:00:1795465174.505284    5858 cpu_feature_guard.cc:227] This TensorFlow binary is optimized",
        b"To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow.",
        b"E0000 00:00:1795465174.6 5858 mkl_util.h:1] oneDNN supports DT_BOOL only on platforms with AVX-512.",
        b"2024-03-01 12:00:00.123456: I tensorflow/core/util/port.cc:113] oneDNN custom operations are on.",
        b"\x1b[0;93m2024-03-01 12:00:00.1 [W:onnxruntime:, graph.cc:1] Initializer h appears in inputs\x1b[m",
        b"WARNING:tensorflow:6 out of the last 6 calls triggered tf.function retracing.",
        b"I0000 00:00:1795465189.6 4415 service.cc:148] XLA service initialized for platform Host:",
        b"  StreamExecutor device (0): Host, Default Version",
        b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.",
    ]:
        os.write(2, line + b"\n")
    print("writing saved_model", file=sys.stderr, flush=True)
    os.write(2, b"F0000 00:00:1795465190.1 4415 tensor.cc:9] Check failed: d < dims() (3 vs. 2)\n")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env=environment(), cwd=ROOT)
    assert proc.returncode == 0 and proc.stderr.splitlines() == [
        "writing saved_model", "cudnn-port: internal error: a library aborted the process: Check failed: d < dims() "
        "(3 vs. 2) (rerun with --verbose to see its log, and report it)"], proc.stderr
    loud = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env=environment(CUDNN_PORT_VERBOSE="1"), cwd=ROOT)
    assert len(loud.stderr.splitlines()) == 13, loud.stderr


def test_a_library_call_filters_the_libraries_logging_and_lets_the_callers_through():
    """Inside a library call (export, convert, verify) a foreign library's Python logging line is filtered by its
    logger's name even where that library reset its own level during the call (tf2onnx's import resets absl's,
    and TFLite's converter then warns through it); the caller's own logging comes through."""
    script = r"""
import logging, sys
from cudnn_port.quiet import library_call
logging.basicConfig(format="%(levelname)s:%(name)s:%(message)s")
with library_call(False):
    logging.getLogger("absl").setLevel(logging.INFO)  # what an import during the call may do
    logging.getLogger("absl").warning("Please consider providing the trackable_obj argument")
    logging.getLogger("myapp").warning("the caller's own line")
    logging.getLogger("keras_tuner").warning("the caller's logger, named like a library")
    logging.getLogger("tensorflow.core").warning("a library's child logger")
    print("cudnn-port's own line", file=sys.stderr, flush=True)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          env=environment(), cwd=ROOT)
    assert proc.returncode == 0 and proc.stderr.splitlines() == [
        "WARNING:myapp:the caller's own line", "WARNING:keras_tuner:the caller's logger, named like a library",
        "cudnn-port's own line"], proc.stderr
