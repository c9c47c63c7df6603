"""Every defect a fuzz run of inspect/convert/verify/bench found, reproduced: no crash, no hang, no data loss, no path
escape; bad input is exit 2 with one short line naming the problem and the fix, nothing written, input unchanged."""
import functools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pytest

from helpers import CHAR_LM, ROOT, SAMPLE, leftovers, make_spec, one_short_line, random_blob, refused, run_cli, \
    save_raw_op_model, tree_hash, write_source
from crafted import copy_checkpoint, edit_entry, edit_header
from cudnn_port import cli

tf = pytest.importorskip("tensorflow")
BUFFER = "cudnn_lstm/opaque_kernel"


@pytest.fixture
def sample(tmp_path):
    return copy_checkpoint(SAMPLE, str(tmp_path / "src"))


# ------------------------------------------------------------------------------------------- crash and hang
@pytest.mark.parametrize("change,needle", [(dict(shape=[-1]), "shape [-1]"), (dict(dtype=9999), "dtype code 9999"),
                                           (dict(shape=[1 << 40], size=4 << 40), "truncated"),
                                           (dict(shard=3), "outside the data files")])
def test_crafted_index_entries(tmp_path, sample, capsys, change, needle):
    """[-1] made TensorFlow's reader abort the process (SIGABRT); 9999 raised a TypeError; [2^40] said "fits 224
    specs" although the data file holds a fraction of that."""
    edit_entry(sample, BUFFER, **change)
    before = tree_hash(os.path.dirname(sample))
    for command in (["inspect", sample], ["convert", sample, tmp_path / "out"]):
        refused(capsys, command, needle)
    assert not (tmp_path / "out").exists() and tree_hash(os.path.dirname(sample)) == before


def test_big_endian_header(sample, capsys):
    edit_header(sample, 2, 1)  # endianness: BIG
    refused(capsys, ["inspect", sample], "big-endian")


def test_a_fifo_data_file_is_refused_not_read(tmp_path, sample):
    data = sample + ".data-00000-of-00001"
    os.remove(data)
    os.mkfifo(data)
    proc = subprocess.run([sys.executable, "-m", "cudnn_port.cli", "convert", sample, str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr


def test_spec_variable_that_is_not_a_spec(tmp_path, capsys):
    """A TF2 checkpoint whose cudnn_spec variable is a float scalar (it crashed with "not enough values")."""
    spec = make_spec("lstm", 1, False)
    module = tf.Module()
    module.opaque_kernel = tf.Variable(random_blob(spec))
    module.cudnn_spec = tf.Variable(3.5)
    path = tf.train.Checkpoint(rnn=module).write(str(tmp_path / "ckpt" / "model"))
    refused(capsys, ["convert", path, tmp_path / "out"], "cudnn_spec", "not a spec", "spec flags")


# ------------------------------------------------------------------------------------------------------ flags
@pytest.mark.parametrize("flags,needle", [
    (["--num-units", str(2 ** 70)], "--num-units must be between"), (["--num-units", "0"], "--num-units must be"),
    (["--num-layers", "0"], "--num-layers must be"), (["--input-size", "0"], "--input-size must be"),
    (["--formats", ""], "--formats is empty"), (["--bidirectional", "--unidirectional"], "not allowed with"),
    (["--style", "nope"], "invalid choice")])
def test_flags_out_of_range_are_usage_errors(tmp_path, sample, capsys, flags, needle):
    refused(capsys, ["convert", sample, tmp_path / "out", *flags], needle)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv,needle", [(["verify", "OUT", "--seed", "-1"], "--seed must be"),
                                         (["verify", "OUT", "--atol", "-1"], "tolerance must be"),
                                         (["bench", "OUT", "--steps", "0"], "--steps must be"),
                                         (["bench", "OUT", "--repeat", "0"], "--repeat must be")])
def test_verify_and_bench_flags(tmp_path, capsys, argv, needle):
    refused(capsys, [a.replace("OUT", str(tmp_path)) for a in argv], needle)


def test_usage_errors_with_json_print_json(capsys):
    code, out, err = run_cli(capsys, "convert", "--json")
    assert code == 2 and json.loads(out)["exit_code"] == 2 and len(err.strip().splitlines()) == 1, (out, err)


def test_spec_flags_on_sources_that_state_their_spec(tmp_path, capsys):
    refused(capsys, ["convert", CHAR_LM, tmp_path / "out", "--num-units", "5"], "--num-units", "leave the spec flags")

    spec = make_spec("gru", 1, False)
    path = save_raw_op_model(tmp_path / "sm", spec, random_blob(spec))
    refused(capsys, ["convert", path, tmp_path / "out", "--mode", "gru"], "--mode", "SavedModel")


def test_flags_contradicting_a_stated_spec(tmp_path, capsys):
    """A Keras 2 .h5 file states each layer's spec: a flag that contradicts it is refused, not ignored."""
    h5 = os.path.join(ROOT, "tests", "fixtures", "keras2_cudnn_weights.h5")
    refused(capsys, ["convert", h5, tmp_path / "out", "--variable", "lstm/opaque_kernel", "--num-units", "5"],
            "contradict", "--num-units 5 (it is 7)")


def test_inf_in_an_optimizer_slot(tmp_path, capsys):
    spec = make_spec("lstm", 1, False)
    slot = random_blob(spec, seed=4)
    slot[2] = np.inf
    src, _ = write_source(tmp_path, spec, extra={f"{BUFFER}/Adam": slot})
    refused(capsys, ["convert", src, tmp_path / "out", *spec.flags().split()], "Adam", "NaN/Inf", "--allow-nonfinite")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []
    code, _, err = run_cli(capsys, "convert", src, tmp_path / "out", *spec.flags().split(), "--allow-nonfinite")
    assert code == 0, err


# ----------------------------------------------------------------------------------------- OUT and data loss
@pytest.mark.slow
def test_force_never_deletes_a_source_inside_out(tmp_path, capsys):
    """convert SAMPLE o; cp -r the sample to o/train; convert o/train/model.ckpt o --force deleted o/train."""
    out = tmp_path / "o"
    assert cli.main(["convert", SAMPLE, str(out), "--quiet"]) == 0
    shutil.copytree(os.path.dirname(SAMPLE), out / "train")
    before = tree_hash(out / "train")
    refused(capsys, ["convert", out / "train" / "model.ckpt", out, "--force"], "lies inside OUT")
    assert tree_hash(out / "train") == before


def test_out_inside_a_saved_model_source(tmp_path, capsys):
    spec = make_spec("lstm", 1, False)
    path = save_raw_op_model(tmp_path / "sm", spec, random_blob(spec))
    before = tree_hash(path)
    refused(capsys, ["convert", path, tmp_path / "sm" / "out"], "inside the source folder")
    assert tree_hash(path) == before


@pytest.mark.parametrize("kind", ["to a folder", "dangling", "loop"])
def test_out_that_is_a_symbolic_link(tmp_path, sample, capsys, kind):
    link = tmp_path / "out"
    target = {"to a folder": tmp_path / "real", "dangling": tmp_path / "missing", "loop": link}[kind]
    if kind == "to a folder":
        target.mkdir()
    os.symlink(target, link)
    refused(capsys, ["convert", sample, link], "symbolic link")
    assert os.path.islink(link) and (kind != "to a folder" or os.listdir(target) == [])


AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@functools.lru_cache(maxsize=None)
def _nobody_runs_this_python() -> bool:
    """Whether user 65534 can start this interpreter: pyenv's Python 3.10 under /root (mode 700) loads its
    libpython from there, so as that user it fails with "cannot open shared object file". Asked once per session."""
    try:
        return subprocess.run(AS_NOBODY + [sys.executable, "-c", "pass"], capture_output=True, timeout=60,
                              cwd="/").returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to run as another user")
@pytest.mark.parametrize("where", ["read-only parent", "read-only OUT"])
def test_out_without_write_permission(where):
    """As an ordinary user (root ignores permissions): one line, exit 2 (it was "internal error: PermissionError")."""
    if not _nobody_runs_this_python():
        pytest.skip("user 65534 cannot start this Python (its files are readable by root only)")
    base = tempfile.mkdtemp(prefix="cudnn_port_perm_")
    try:
        os.chmod(base, 0o755)
        src = copy_checkpoint(SAMPLE, os.path.join(base, "src"))
        for f in os.listdir(os.path.dirname(src)):
            os.chmod(os.path.join(os.path.dirname(src), f), 0o644)
        os.chmod(os.path.dirname(src), 0o755)
        parent = os.path.join(base, "locked")
        os.mkdir(parent)
        out = os.path.join(parent, "out")
        if where == "read-only OUT":
            os.mkdir(out)
            os.chmod(out, 0o555)
        os.chmod(parent, 0o555)
        proc = subprocess.run(AS_NOBODY + [sys.executable, "-m", "cudnn_port.cli", "convert", src, out],
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, PYTHONPATH=ROOT, HOME=base), cwd=base)
        assert proc.returncode == 2, proc.stderr
        one_short_line(proc.stderr, src, out, parent)
        assert "permission" in proc.stderr.lower()
    finally:
        for root, dirs, _ in os.walk(base):
            for d in dirs:
                os.chmod(os.path.join(root, d), stat.S_IRWXU)
        shutil.rmtree(base)


@pytest.mark.slow
def test_layer_names_never_become_paths(tmp_path):
    """A Keras layer named ".." wrote its per-layer artifacts over the whole model's saved_model."""
    import keras

    import cudnn_port
    from cudnn_port.layers import CudnnGRU
    from cudnn_port.verify import verify

    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, CudnnGRU(4, return_sequences=True, name="..")(inputs))
    manifest = cudnn_port.export(model, tmp_path / "out")
    layer_dirs = os.listdir(tmp_path / "out" / "layers")
    assert layer_dirs == ["_"] and all(".." not in p for p in manifest["files"])
    assert verify(tmp_path / "out")["passed"]


# -------------------------------------------------------------------------------------- inputs of every kind
def test_saved_model_with_missing_or_corrupt_variables(tmp_path, capsys):
    spec = make_spec("lstm", 1, False)
    path = save_raw_op_model(tmp_path / "sm", spec, random_blob(spec), op="CudnnRNNV2", as_variable=True)
    data = [f for f in os.listdir(os.path.join(path, "variables")) if ".data-" in f][0]
    with open(os.path.join(path, "variables", data), "r+b") as f:
        f.truncate(10)
    refused(capsys, ["convert", path, tmp_path / "out"], "truncated")
    shutil.rmtree(os.path.join(path, "variables"))
    refused(capsys, ["convert", path, tmp_path / "out"], "variables/ is missing")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_empty_saved_model_pb(tmp_path, capsys):
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    refused(capsys, ["convert", tmp_path / "sm", tmp_path / "out"], "holds no graph")


def test_h5_with_a_huge_dataset_and_a_flipped_byte(tmp_path, capsys):
    import h5py

    path = tmp_path / "huge.h5"
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [b"lstm"]
        group = f.create_group("lstm")
        group.attrs["weight_names"] = [b"lstm/kernel:0", b"lstm/recurrent_kernel:0", b"lstm/bias:0"]
        group.create_dataset("lstm/kernel:0", shape=(1 << 20, 1 << 20), dtype="f4")
        group.create_dataset("lstm/recurrent_kernel:0", data=np.zeros((2, 8), "f4"))
        group.create_dataset("lstm/bias:0", data=np.zeros(16, "f4"))
    refused(capsys, ["inspect", path], "damaged")
    flipped = tmp_path / "flipped.h5"
    data = bytearray(open(os.path.join(ROOT, "tests", "fixtures", "keras2_cudnn_model.h5"), "rb").read())
    for at in range(len(data) - 400, len(data) - 200, 7):
        data[at] ^= 0xFF
    flipped.write_bytes(bytes(data))
    code, _, err = run_cli(capsys, "convert", flipped, tmp_path / "out")
    assert code in (0, 2) and "Traceback" not in err and "internal error" not in err, err


@pytest.mark.parametrize("content,needle", [(b"", "not a zip archive"), (None, "not a zip archive")])
def test_empty_or_truncated_keras_file(tmp_path, capsys, content, needle):
    data = open(CHAR_LM, "rb").read()
    (tmp_path / "m.keras").write_bytes(data[:len(data) // 2] if content is None else content)
    refused(capsys, ["convert", tmp_path / "m.keras", tmp_path / "out"], needle, "model.save")


def test_inspect_of_a_layers_checkpoint_says_where_its_spec_is(tmp_path, capsys):
    """It claimed "TF1 canonical tensors beside it" for a TF2 checkpoint of the fused layers."""
    import keras

    from cudnn_port.layers import CudnnLSTM

    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, CudnnLSTM(4)(inputs))
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt" / "model"))
    code, out, _ = run_cli(capsys, "inspect", path)
    assert code == 0 and "canonical tensors" not in out and "cudnn_port.layers" in out, out


@pytest.mark.slow
def test_keras_export_manifest_does_not_list_itself(tagger_out):
    manifest = tagger_out[1]
    assert "manifest.json" not in manifest["files"] and "model_parity.json" in manifest["files"]


def test_numpy_integers_read_as_numbers():
    from cudnn_port.errors import CudnnPortError
    from cudnn_port.layout import RNNSpec

    with pytest.raises(CudnnPortError, match=r"num_units=0,") as e:
        RNNSpec("lstm", 1, np.int32(0), 3)
    assert "np." not in str(e.value)


# ----------------------------------------------------------------------------------------------- signals
def run_and_signal(argv, signum, delay, cwd):
    """The CLI in a child process, sent ``signum`` ``delay`` seconds after its first progress line: before that line
    Python may still be starting up (on a loaded machine, over 2 s), where SIGTERM ends any process before its
    handlers exist."""
    proc = subprocess.Popen([sys.executable, "-m", "cudnn_port.cli", *argv], cwd=cwd,
                            env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        first = proc.stderr.readline()
        time.sleep(delay)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    return proc.returncode, first + err


@pytest.mark.slow
@pytest.mark.parametrize("signum,delay", [(signal.SIGTERM, 2.0), (signal.SIGTERM, 4.5), (signal.SIGTERM, 7.0),
                                          (signal.SIGINT, 3.5), (signal.SIGINT, 6.0)])
def test_a_signal_at_any_moment_leaves_no_out_or_a_whole_one(tmp_path, signum, delay):
    from cudnn_port.manifest import load_manifest
    from cudnn_port.verify import file_rows

    code, err = run_and_signal(["convert", SAMPLE, "out"], signum, delay, tmp_path)
    assert code in (0, 128 + signum), (code, err)
    assert "Traceback" not in err and leftovers(tmp_path) == []
    if (tmp_path / "out").exists():
        assert file_rows(str(tmp_path / "out"), load_manifest(tmp_path / "out"))[0]["passed"]
    else:
        assert code == 128 + signum and "nothing was written" in err


def signalled(body, *args):
    """Run ``body`` (Python source, after ``import os, signal, sys, time; from cudnn_port import cli``) in a child
    process that signals itself, and return (the exit code it prints last, its stderr): a signal sent there can
    never reach this test runner (pytest's SIGINT handler, or SIGTERM's default, which ends an xdist worker)."""
    proc = subprocess.run([sys.executable, "-c", "import os, signal, sys, time\nfrom cudnn_port import cli\n" +
                           textwrap.dedent(body), *map(str, args)], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip(), (proc.returncode, proc.stdout[-1000:], proc.stderr[-3000:])
    return int(proc.stdout.split()[-1]), proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_a_library_turns_into_its_own_error_is_still_an_interrupt(signum):
    """TensorFlow's import, cut by a signal, raises "ImportError: initialization failed" in place of ours: that was
    reported as "tensorflow is not installed", exit 2."""
    code, err = signalled("""
        def run(args, progress):
            try:
                os.kill(os.getpid(), int(sys.argv[1]))
                time.sleep(5)
            except BaseException:
                raise ImportError("initialization failed") from None

        cli.run = run
        print(cli.main(["inspect", "x"]))
    """, int(signum))
    assert code == 128 + signum and "interrupted" in err, err


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_inside_a_destructor_is_still_an_interrupt(signum):
    """SIGTERM 4.5 s into convert landed in a TensorFlow ``__del__``: Python printed "Exception ignored ...
    Traceback" and carried on."""
    code, err = signalled("""
        class Resource:
            def __del__(self):
                os.kill(os.getpid(), int(sys.argv[1]))
                time.sleep(0.5)

        def run(args, progress):
            resource = Resource()
            del resource
            time.sleep(5)  # the interrupt lands here
            return 0, {}, "finished: the signal was lost"

        cli.run = run
        print(cli.main(["inspect", "x"]))
    """, int(signum))
    assert code == 128 + signum and "interrupted" in err and "Traceback" not in err and "ignored" not in err, err


@pytest.mark.slow
def test_a_destructor_the_interrupt_cut_short_prints_nothing():
    """SIGINT 3.5 s into convert at TF 2.16 cut an object's __init__ short; its __del__ then failed with an
    AttributeError that Python printed with a traceback after our one line."""
    code, err = signalled("""
        class HalfBuilt:
            def __init__(self):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)
                self.handle = 1

            def __del__(self):
                self.handle.close()

        def run(args, progress):
            HalfBuilt()

        cli.run = run
        sys.unraisablehook = lambda u: print(f"Traceback: {u.exc_value!r}", file=sys.stderr)
        print(cli.main(["inspect", "x"]))
    """)
    assert code == 130 and "interrupted" in err and "Traceback" not in err, err


@pytest.mark.slow
def test_sigint_while_exporting_a_keras_model_is_handled(tmp_path):
    """One SIGINT 5 s into converting the char LM ended the process by the signal itself (exit -2)."""
    code, err = run_and_signal(["convert", CHAR_LM, "out"], signal.SIGINT, 5.0, tmp_path)
    assert code in (0, 130), (code, err)
    assert leftovers(tmp_path) == [] and (code == 0) == (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------- what is not installed
def without(modules, code):
    """Run ``code`` in a fresh interpreter where ``modules`` cannot be imported."""
    blocker = f"import sys\nfor m in {modules!r}: sys.modules[m] = None\n"
    return subprocess.run([sys.executable, "-c", blocker + code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT), cwd=ROOT)


@pytest.mark.slow
def test_import_and_help_need_no_tensorflow():
    proc = without(["tensorflow", "keras", "onnx", "onnxruntime", "tf2onnx", "torch"],
                   "import cudnn_port, cudnn_port.cli\nfrom cudnn_port import RNNSpec, unpack, reference\n"
                   "sys.argv = ['cudnn-port', '--help']\ncudnn_port.cli.main()")
    assert proc.returncode == 0 and "convert" in proc.stdout, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("modules,needle", [(["tensorflow"], "needs tensorflow"), (["onnx"], "needs onnx"),
                                            (["tf2onnx"], "needs tf2onnx")])
def test_a_missing_optional_piece_names_the_extra(tmp_path, modules, needle):
    proc = without(modules, f"from cudnn_port.cli import main\nsys.exit(main(['convert', {SAMPLE!r}, "
                            f"{str(tmp_path / 'out')!r}]))")
    assert proc.returncode == 2 and needle in proc.stderr and "cudnn-port[cpu]" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()
