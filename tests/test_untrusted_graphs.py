"""A model file's graph is data: convert, verify and bench run nothing of a SavedModel or frozen graph beyond pure
computation unless --trust-source says so (cudnn_port.graphs.allowlist), and the allow-list refuses no real model.

Each crafted model is built here with TensorFlow on CPU (tests/untrusted_models.py); the commands run as
subprocesses under a time limit, so a graph that hangs fails the test instead of hanging it. The judge of "nothing
ran" is the file system: the file the graph would write is absent, and so is OUT.
"""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT
import untrusted_models as crafted

tf = pytest.importorskip("tensorflow")
from cudnn_port.errors import CudnnPortError  # noqa: E402
from cudnn_port.graphs import allowlist, load_proto  # noqa: E402
from cudnn_port.graphs.trust import check_out, graph_paths  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
ARCHIVES = sorted(f[:-len(".tar.xz")] for f in os.listdir(FIXTURES) if f.endswith(".tar.xz"))  # every archive
TIME_LIMIT = 180  # seconds a refused command may take at most (TensorFlow's import dominates; a hang is killed)
PEAK_LIMIT = 1.6 * 2 ** 30  # bytes: a refused bomb stays far below the 2 GiB its constant declares
# The child's own peak: VmHWM, the high-water mark of its own memory map (getrusage's ru_maxrss would carry over the
# RSS of the pytest process it was forked from, which a long run grows past the limit).
RUN = ("import os, re, sys\nfrom cudnn_port.cli import main\ncode = main(sys.argv[1:])\n"
       "hwm = re.search(r'VmHWM:\\s*(\\d+) kB', open('/proc/self/status').read()).group(1)\n"
       "open(os.environ['PEAK_FILE'], 'w').write(str(int(hwm) * 1024))\nsys.exit(code)")


def run_cli(tmp_path, *argv):
    """The CLI in a subprocess under TIME_LIMIT: (exit code, stdout, stderr, peak resident bytes)."""
    peak = tmp_path / f"peak-{len(os.listdir(tmp_path))}"
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    proc = subprocess.run([sys.executable, "-c", RUN, *map(str, argv)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=TIME_LIMIT, env=dict(env, PYTHONPATH=ROOT, PEAK_FILE=str(peak)))
    return proc.returncode, proc.stdout, proc.stderr, int(peak.read_text()) if peak.exists() else None


def refusal(code, err, *needles):
    """Exit 2 and one line on stderr, holding ``needles``; returns the line."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("cudnn-port: error: "), (code, err)
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Every crafted SavedModel, and the files they would write."""
    root = tmp_path_factory.mktemp("crafted")
    (root / "vocab.txt").write_text("alpha beta gamma")
    targets = {"write": root / "planted.pth", "print": root / "printed.txt"}
    built = {"write": crafted.write_file(root / "write", targets["write"]),
             "print": crafted.print_to_file(root / "print", targets["print"]),
             "gs": crafted.read_address_at_load(root / "gs", root / "vocab.txt"),
             "queue": crafted.dequeue(root / "queue"), "pyfunc": crafted.python_callback(root / "pyfunc"),
             "bomb": crafted.constant_bomb(root / "bomb")}
    return built, targets


CASES = [("write", "(WriteFile)", "reads or writes files"), ("print", "(PrintV2)", "prints to 'file://"),
         ("gs", "gs://cudnn-port-test-bucket", "a place outside the model"),
         ("queue", "(FIFOQueueV2)", "waits on a queue"), ("pyfunc", "(EagerPyFunc)", "calls Python")]


@pytest.mark.parametrize("name,op,why", CASES, ids=[c[0] for c in CASES])
def test_convert_refuses_a_graph_beyond_pure_computation_and_runs_none_of_it(models, tmp_path, name, op, why):
    built, targets = models
    code, _, err, _ = run_cli(tmp_path, "convert", built[name], tmp_path / "out")
    line = refusal(code, err, op, why, "nothing ran" if name != "pyfunc" else "replace it by TensorFlow ops")
    assert "--trust-source" in line or name == "pyfunc"
    assert not (tmp_path / "out").exists() and not any(t.exists() for t in targets.values())


@pytest.mark.slow
def test_a_python_callback_is_refused_even_with_trust_source(models, tmp_path):
    built, _ = models
    code, _, err, _ = run_cli(tmp_path, "convert", built["pyfunc"], tmp_path / "out", "--trust-source")
    refusal(code, err, "(EagerPyFunc)", "whose code is not in the model")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_constant_bomb_is_one_line_before_anything_allocates_it(models, tmp_path):
    built, _ = models
    assert os.path.getsize(built["bomb"] / "saved_model.pb") < 64 * 1024  # declares 2 GiB
    for argv in (["convert", built["bomb"], tmp_path / "out"], ["inspect", built["bomb"]],
                 ["convert", built["bomb"], tmp_path / "out", "--trust-source"]):
        code, _, err, peak = run_cli(tmp_path, *argv)
        refusal(code, err, "declares a [536870912] constant of 2 GiB but stores 8 bytes")
        assert peak < PEAK_LIMIT, f"{argv[0]}: peak {peak / 2 ** 30:.2f} GiB"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_inspect_lists_what_the_graph_runs_beyond_compute_and_runs_none_of_it(models, tmp_path):
    from cudnn_port.inspection import inspect_source

    built, targets = models
    report = inspect_source(built["write"])
    assert [(f["op"], f["why"]) for f in report["beyond_compute"]] == [("WriteFile", "reads or writes files")]
    assert "verify and bench load and run" in report["runs_graph"] and "inspect runs none" in report["runs_graph"]
    code, out, err, _ = run_cli(tmp_path, "inspect", built["queue"])
    assert code == 0 and "QueueDequeueV2 (QueueDequeueV2)" in out and "refused unless --trust-source" in out, err
    assert not targets["write"].exists()


def _foreign_out(out, saved_model=None, graph_def=None, source=None):
    """An OUT as someone else might hand it over: a manifest of ours listing every file with its sha256, around a
    SavedModel (whole-graph kind) or a frozen graph (one stack's graphdef); ``source``: the SavedModel folder the
    manifest names as its source (verify's judge runs the original's signature)."""
    import shutil

    from cudnn_port.manifest import TOOL

    out.mkdir()
    manifest = {"tool": TOOL, "source": {"checkpoint": str(source or out / "gone"), "format": "SavedModel"},
                "stacks": [], "model_artifacts": {}}
    if saved_model is not None:
        shutil.copytree(saved_model, out / "saved_model")
        manifest.update(kind="saved_model", model_artifacts={"saved_model": "saved_model"})
    if graph_def is not None:
        (out / "frozen_graph.pb").write_bytes(graph_def.SerializeToString())
        spec = dict(mode="lstm", num_layers=1, num_units=4, input_size=3, bidirectional=False)
        manifest["stacks"] = [{"variable": "rnn/opaque_kernel", "prefix": "rnn", "label": "", "spec": spec,
                               "artifacts": {"graphdef": "frozen_graph.pb"}}]
    files = [os.path.join(root, f) for root, _, fs in os.walk(out) for f in fs]
    manifest["files"] = {os.path.relpath(f, out): hashlib.sha256(Path(f).read_bytes()).hexdigest() for f in files}
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.mark.slow
def test_verify_and_bench_refuse_a_foreign_out_whose_graphs_write_files(models, tmp_path):
    built, targets = models
    target = tmp_path / "from_graphdef.txt"

    @tf.function(input_signature=[tf.TensorSpec([None, None, 3], tf.float32)])
    def outputs(inputs):
        with tf.control_dependencies([tf.io.write_file(str(target), "planted")]):
            return tf.identity(inputs, name="outputs")

    whole = _foreign_out(tmp_path / "whole", saved_model=built["write"])
    stack = _foreign_out(tmp_path / "stack", graph_def=outputs.get_concrete_function().graph.as_graph_def())
    assert [k for k, _ in graph_paths(str(whole), json.loads((whole / "manifest.json").read_text()))] == ["saved_model"]
    for command, out, op in (("verify", whole, "(WriteFile)"), ("bench", whole, "(WriteFile)"),
                             ("verify", stack, "(WriteFile)"), ("bench", stack, "(WriteFile)")):
        code, _, err, _ = run_cli(tmp_path, command, out)
        refusal(code, err, op, "nothing ran", "--trust-source")
    assert not targets["write"].exists() and not target.exists()
    assert not (whole / "parity.json").exists() and not (stack / "parity.json").exists()


@pytest.mark.slow
def test_verify_refuses_a_source_saved_model_that_its_manifest_names(models, tmp_path):
    """verify's judge of a converted SavedModel runs the original's signature: a manifest naming a crafted SavedModel
    as its source gets it checked like OUT's own graphs, before anything runs."""
    built, targets = models
    out = _foreign_out(tmp_path / "out", source=built["write"])
    assert [kind for kind, _ in graph_paths(str(out), json.loads((out / "manifest.json").read_text()))] == \
        ["saved_model"]
    code, _, err, _ = run_cli(tmp_path, "verify", out)
    refusal(code, err, "(WriteFile)", "nothing ran", "--trust-source")
    assert not targets["write"].exists() and not (out / "parity.json").exists()


@pytest.mark.slow
def test_trust_source_runs_the_graph_and_says_so_once(tmp_path):
    target = tmp_path / "written_on_purpose.txt"
    out = _foreign_out(tmp_path / "out", saved_model=crafted.write_file(tmp_path / "model", target))
    code, stdout, err, _ = run_cli(tmp_path, "verify", out, "--trust-source")
    assert code == 1 and "unjudged" not in err, err  # no original to judge it: OUT/saved_model only agrees with itself
    code, stdout, err, _ = run_cli(tmp_path, "verify", out, "--trust-source", "--allow-unjudged")
    assert code == 0 and "PASSED (1 row not judged)" in stdout, stdout + err
    said = [line for line in err.splitlines() if line.startswith("--trust-source:")]
    assert len(said) == 1 and "WriteFile" in said[0] and "1 node(s) beyond pure computation" in said[0], err
    assert target.read_text() == "import os  # planted\n"  # what the model's graph writes, run on purpose


def test_the_library_call_refuses_too_and_takes_trust_source_as_a_keyword(models, tmp_path):
    import cudnn_port

    built, targets = models
    with pytest.raises(CudnnPortError, match=r"\(PrintV2\).*--trust-source"):
        cudnn_port.convert(built["print"], tmp_path / "out")
    said = []
    with pytest.raises(CudnnPortError, match="no CudnnRNN/CudnnRNNV2/CudnnRNNV3 node"):  # past the allow-list
        cudnn_port.convert(built["print"], tmp_path / "out", trust_source=True, progress=said.append)
    assert sum(s.startswith("--trust-source:") for s in said) == 1 and "PrintV2" in said[0]
    assert not targets["print"].exists() and not (tmp_path / "out").exists()


def _fixture_saved_models(tmp_path_factory):
    import tarfile

    root = tmp_path_factory.mktemp("fixtures")
    for name in ARCHIVES:
        with tarfile.open(os.path.join(FIXTURES, f"{name}.tar.xz")) as archive:
            archive.extractall(root, filter="data")
    folders = [str(root), os.path.join(FIXTURES, "realworld", "iteam1_rnn")]
    return sorted(r for folder in folders for r, _, files in os.walk(folder) if "saved_model.pb" in files)


@pytest.mark.slow
def test_the_allow_list_refuses_no_saved_model_fixture(tmp_path_factory):
    found = _fixture_saved_models(tmp_path_factory)
    assert len(found) >= 23 and any(f.endswith("text_gru") for f in found), found  # every archive, iteam1_rnn
    for folder in found:
        proto = load_proto(folder)
        assert allowlist.saved_model_findings(proto) == [], folder
        allowlist.check_saved_model(folder, proto)


@pytest.mark.slow
def test_the_allow_list_refuses_nothing_in_the_project_outputs(tmp_path):
    import cudnn_port

    checked = []
    for source, out in ((os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt"), tmp_path / "tf1"),
                        (os.path.join(ROOT, "models", "char_lm", "model.keras"), tmp_path / "char_lm")):
        manifest = cudnn_port.convert(source, out)
        paths = graph_paths(str(out), manifest)
        check_out(str(out), manifest, say=checked.append)  # raises on a finding
        assert {k for k, _ in paths} == {"saved_model", "graphdef"}, paths
        checked += paths
    assert len(checked) >= 6  # both outputs' saved_model and frozen_graph.pb, and each layer's of the char LM


@pytest.mark.slow
def test_keras_safe_mode_refusals_say_what_was_refused_and_how_to_opt_in(tmp_path):
    import keras

    inputs = keras.Input((3,))
    keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs)).save(tmp_path / "lambda.keras")
    keras.Model(inputs, keras.layers.Lambda(lambda x: x * 2)(inputs)).save(tmp_path / "lambda.h5")  # Keras 3's .h5

    @keras.saving.register_keras_serializable(package="untrusted_test")
    class Planted(keras.layers.Layer):  # registered in this process only: the CLI's process does not know it
        def call(self, x):
            return x

    keras.Model(inputs, Planted()(inputs)).save(tmp_path / "custom.keras")
    keras.Model(inputs, Planted()(inputs)).save(tmp_path / "custom.h5")  # Keras' .h5 loader: "Unknown layer"
    for name in ("lambda.keras", "lambda.h5"):  # the .h5 holds the function's bytecode: it must not run either
        code, _, err, _ = run_cli(tmp_path, "convert", tmp_path / name, tmp_path / "out")
        refusal(code, err, "holds Python code (a Lambda layer's function)", "safe mode", "safe_mode=False",
                "cudnn_port.export(model, OUT)")
    for name in ("custom.keras", "custom.h5"):
        code, _, err, _ = run_cli(tmp_path, "convert", tmp_path / name, tmp_path / "out")
        refusal(code, err, "Planted'", "custom object whose code is not in the file", "custom_objects=")
    assert not (tmp_path / "out").exists()
