"""What the test modules share, in one place (test modules import from here, never from each other; fixtures live in
conftest.py): seeded random stacks and batches, sources built under a test's folder, the CLI run in-process, the
checks every comparison and every refusal makes, and the small fused-layer model several files export."""
import hashlib
import itertools
import json
import os
import subprocess

import numpy as np

from cudnn_port.layout import RNNSpec, unpack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "models", "tf1_bilstm", "model.ckpt")  # the bundled TF1 checkpoint
CHAR_LM = os.path.join(ROOT, "models", "char_lm", "model.keras")  # the bundled whole Keras model

# fp32 parity bound from issue 2; measured max |error| for these sizes is ~2e-7.
ATOL_FP32 = 1e-5
WHOLE_TOLERANCE = (1e-5, 1e-4)  # a whole model's artifacts against Keras: |err| <= ATOL + RTOL * |Keras|
INPUT, HIDDEN = 6, 5  # distinct on purpose: I != H catches transposed or swapped regions
CONFIGS = [(mode, layers, bi) for mode, layers, bi in itertools.product(("lstm", "gru"), (1, 2, 3), (False, True))]
CONFIG_IDS = [f"{m}-L{n}-{'bi' if b else 'uni'}" for m, n, b in CONFIGS]
MAX_MESSAGE = 200  # characters of an error line, not counting the paths it quotes


def make_spec(mode, layers, bidirectional, dtype="float32", input_size=INPUT, hidden=HIDDEN) -> RNNSpec:
    return RNNSpec(mode, layers, hidden, input_size, bidirectional, dtype)


SAMPLE_SPEC = make_spec("lstm", 2, True, input_size=32, hidden=48)  # what make_tf1_checkpoint writes


def random_blob(spec, seed=0) -> np.ndarray:
    """Distinct random values (N(0,1) * 0.3): constant weights would hide gate-order bugs."""
    return (np.random.default_rng(seed).normal(size=spec.param_count) * 0.3).astype(spec.dtype)


def random_canon(spec, seed=0):
    return unpack(spec, random_blob(spec, seed))


def ragged_batch(spec, batch=4, steps=7, seed=1):
    """x [B, T, I], lengths (full, 1 and in between), non-zero h_0 / c_0 [L*D, B, H]."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, steps, spec.input_size)).astype("float32")
    lengths = np.array([steps, 1, 4, steps - 1][:batch], dtype=np.int32)
    x[np.arange(steps)[None, :] >= lengths[:, None]] = 0.0
    shape = (spec.num_pseudo_layers, batch, spec.num_units)
    h_0 = (rng.normal(size=shape) * 0.5).astype("float32")
    c_0 = (rng.normal(size=shape) * 0.5).astype("float32")
    return x, lengths, h_0, c_0


def tree_hash(path) -> str:
    """sha256 over every file below ``path`` (names and bytes), to prove inputs are never modified."""
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for f in sorted(files):
            full = os.path.join(root, f)
            h.update(os.path.relpath(full, path).encode())
            with open(full, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def leftovers(folder) -> list:
    """Hidden entries (temporary siblings) left in ``folder``."""
    return [n for n in os.listdir(folder) if n.startswith(".")]


# ------------------------------------------------------------------------------------------------- comparisons
def assert_close(got, want, what, atol=ATOL_FP32, rtol=0.0, same_shape=False):
    """|got - want| <= atol + rtol * |want| everywhere (``same_shape``: and equal shapes, not only broadcastable
    ones); the message names ``what`` and the error."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert not same_shape or got.shape == want.shape, f"{what}: shape {got.shape}, the judge's {want.shape}"
    err = np.abs(got - want)
    assert np.all(err <= atol + rtol * np.abs(want)), f"{what}: max abs error {err.max():.3g} > {atol} + {rtol}|judge|"


def assert_all_close(got, want, what, names=("outputs", "h_n", "c_n"), atol=ATOL_FP32, rtol=0.0, same_shape=False):
    """``assert_close`` on each pair of two equally long lists, named by ``names`` (then output_k); a pair whose
    judge is None (a GRU's c_n) is skipped."""
    assert len(got) == len(want), f"{what}: {len(got)} outputs, the judge has {len(want)}"
    names = list(names) + [f"output_{k}" for k in range(len(names), len(want))]
    for name, g, w in zip(names, got, want):
        if w is not None:
            assert_close(g, w, f"{what} {name}", atol, rtol, same_shape)


# ---------------------------------------------------------------------------------------------------- the CLI
def run_cli(capsys, *argv):
    """``cudnn-port ARGV`` in this process: (exit code, stdout, stderr)."""
    from cudnn_port import cli

    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def cli(*argv) -> subprocess.CompletedProcess:
    """``cudnn-port ARGV`` in this process, where no capsys is at hand (a module fixture): what a subprocess gives
    (returncode, stdout, stderr: cudnn-port's own lines), without a TensorFlow import per call."""
    import contextlib
    import io

    from cudnn_port import cli as cli_module

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_module.main([str(a) for a in argv])
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def assert_clean_error(code, err, *needles):
    """Exit 2, one ``cudnn-port:`` line that ends stderr, no traceback, every needle in it."""
    assert code == 2, err
    errors = [line for line in err.strip().splitlines() if line.startswith("cudnn-port:")]
    assert len(errors) == 1 and err.strip().endswith(errors[0]) and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def one_short_line(err, *paths) -> str:
    """The one error line, its length without the quoted paths at most MAX_MESSAGE."""
    assert_clean_error(2, err)
    line = [line for line in err.strip().splitlines() if line.startswith("cudnn-port:")][0]
    text = line
    for path in sorted({os.path.abspath(str(p)) for p in paths} | {str(p) for p in paths}, key=len, reverse=True):
        text = text.replace(path, "PATH")
    assert len(text) <= MAX_MESSAGE, f"{len(text)} characters: {line}"
    return line


def refused(capsys, argv, *needles, paths=()) -> str:
    """Run the CLI; it must exit 2 with one short line holding ``needles``."""
    code, _, err = run_cli(capsys, *argv)
    assert code == 2, err
    line = one_short_line(err, *[a for a in argv if os.sep in str(a)], *paths)
    for needle in needles:
        assert needle in line, line
    return line


# ------------------------------------------------------------------------------------------------- sources
def spec_flags(spec) -> dict:
    """``convert``'s spec keywords for ``spec`` (no projection)."""
    return dict(mode=spec.mode, num_layers=spec.num_layers, num_units=spec.num_units, input_size=spec.input_size,
                bidirectional=spec.bidirectional)


def write_source(tmp_path, spec, name="cudnn_lstm/opaque_kernel", seed=0, extra=None):
    """A TF1 Saver checkpoint under ``tmp_path/src`` holding a random buffer ``name`` for ``spec`` beside two
    ordinary variables, as a model saves them (a dense layer taking the stack's outputs, a step counter), and
    ``extra``: (its prefix, the buffer)."""
    from make_tf1_checkpoint import save_tf1

    blob = random_blob(spec, seed)
    width = spec.num_dirs * spec.state_size
    variables = {name: blob, "dense/kernel": np.ones((width, 2), "float32"), "global_step": np.int64(7)}
    variables.update(extra or {})
    return save_tf1(str(tmp_path / "src" / "model.ckpt"), variables), blob


def save_params_module(path, blob, input_signature, compute, as_variable=True) -> str:
    """A SavedModel at ``path`` whose one signature (serving_default, inputs named by ``input_signature``'s specs)
    returns ``compute(params, *inputs)``: ``params`` holds ``blob`` as a tf.Variable, or a constant."""
    import tensorflow as tf

    class Stack(tf.Module):
        def __init__(self):
            super().__init__()
            self.params = tf.Variable(blob) if as_variable else tf.constant(blob)

        @tf.function(input_signature=input_signature)
        def run(self, *inputs):
            return compute(self.params, *inputs)

    module = Stack()
    tf.saved_model.save(module, str(path), signatures=module.run.get_concrete_function())
    return str(path)


def save_raw_op_model(path, spec, blob, op="CudnnRNN", as_variable=False, **attrs) -> str:
    """A SavedModel calling a cuDNN op directly (time-major), params a constant or a variable: what TF1-era and
    hand-written graphs hold. Signature: inputs [B, T, I] -> outputs [B, T, D*H], final_h [L*D, B, H]."""
    import tensorflow as tf

    D, H = spec.num_dirs, spec.num_units

    def run(params, inputs):
        state = tf.zeros([spec.num_layers * D, tf.shape(inputs)[0], H])
        result = getattr(tf.raw_ops, op)(
            input=tf.transpose(inputs, [1, 0, 2]), input_h=state, input_c=state, params=params,
            rnn_mode=spec.mode, direction="bidirectional" if D == 2 else "unidirectional", is_training=False, **attrs)
        return {"outputs": tf.transpose(result[0], [1, 0, 2]), "final_h": result[1]}

    signature = [tf.TensorSpec([None, None, spec.input_size], tf.float32, name="inputs")]
    return save_params_module(path, blob, signature, run, as_variable)


def torch_grads(spec, buffer, x, lengths, h0, c0, gy, ghn, gcn=None, dtype="float32"):
    """PyTorch's CPU kernels (nn.LSTM / GRU holding ``buffer``, packed ragged batch): ([outputs, h_n, c_n], [d
    buffer, dx, dh0, dc0]) for loss = sum(outputs * gy) + sum(h_n * ghn) [+ sum(c_n * gcn)]. Independent of
    cudnn_port's math: the judge of gradients. ``dtype="float64"`` computes everything in float64 (the module, the
    inputs, the cotangents): an exact truth for float32 paths to be measured against."""
    import torch

    from cudnn_port.layout import pack
    from cudnn_port.targets import pytorch as torch_target

    kind = getattr(torch, dtype)
    cls = torch.nn.LSTM if spec.mode == "lstm" else torch.nn.GRU
    module = cls(spec.input_size, spec.num_units, spec.num_layers, batch_first=True, bidirectional=spec.bidirectional,
                 **({"proj_size": spec.num_proj} if spec.num_proj else {})).to(kind)
    module.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)).to(kind) for k, v in
                            torch_target.write(unpack(spec, buffer), "").items()})
    xt, h0t = (torch.tensor(np.asarray(a, dtype), requires_grad=True) for a in (x, h0))
    c0t = torch.tensor(np.asarray(c0, dtype), requires_grad=True) if spec.mode == "lstm" else None
    packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.tensor(np.asarray(lengths).astype(np.int64)),
                                                     batch_first=True, enforce_sorted=False)
    out, final = module(packed, (h0t, c0t) if c0t is not None else h0t)
    y, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    hn, cn = final if c0t is not None else (final, None)
    loss = (y * torch.tensor(gy, dtype=kind)).sum() + (hn * torch.tensor(ghn, dtype=kind)).sum()
    loss = loss + ((cn * torch.tensor(gcn, dtype=kind)).sum() if cn is not None else 0)
    loss.backward()
    grads = {k: p.grad.numpy() for k, p in module.named_parameters()}
    forward = [t.detach().numpy() if t is not None else None for t in (y, hn, cn)]
    return forward, [pack(torch_target.read(grads, "", spec), dtype), xt.grad.numpy(), h0t.grad.numpy(),
                     None if c0t is None else c0t.grad.numpy()]


def unpack_fixture(tmp_path_factory, archive, folder):
    """Extract a fixture tarball into a fresh temporary folder: (the folder ``folder`` in it, its expected.npz as a
    dict of arrays)."""
    import tarfile

    root = tmp_path_factory.mktemp(folder)
    with tarfile.open(archive) as opened:
        opened.extractall(root, filter="data")
    with np.load(root / folder / "expected.npz") as data:
        return root / folder, dict(data)


TAGGER_UNITS = {"lstm": 5, "gru": 4}  # != the embedding's width (6), != each other
TAGGER_VOCAB = 20  # token ids 1 .. 19; 0 is padding
TAGGER_EMBED = 6


def tagger(stacks=(("encoder", "lstm", 2, True), ("decoder", "gru", 1, False)), seed=3, with_states=False):
    """Token ids (0 = padding, masked) -> Embedding(mask_zero) -> one fused layer per (name, kind, layers,
    bidirectional) of ``stacks`` (``with_states``: its initial states [B, L*D, H] are model inputs named
    ``{name}_h`` / ``{name}_c``, else zeros) -> Dense(3): fused layers amid ordinary ones. Every weight N(0,1) * 0.3
    from ``seed``."""
    import keras

    from cudnn_port.layers import CudnnGRU, CudnnLSTM

    tokens = keras.Input((None,), dtype="int32", name="tokens")
    inputs, x = [tokens], keras.layers.Embedding(TAGGER_VOCAB, TAGGER_EMBED, mask_zero=True, name="embed")(tokens)
    for name, kind, layers, bidirectional in stacks:
        units, pseudo = TAGGER_UNITS[kind], layers * (2 if bidirectional else 1)
        names = [f"{name}_{s}" for s in ("h", "c")[:1 + (kind == "lstm")]] if with_states else []
        states = [keras.Input((pseudo, units), name=n) for n in names] or None
        layer = {"lstm": CudnnLSTM, "gru": CudnnGRU}[kind]
        x = layer(units, num_layers=layers, bidirectional=bidirectional, return_sequences=True, name=name)(
            x, initial_state=states)
        inputs += states or []
    model = keras.Model(inputs, keras.layers.Dense(3, name="head")(x))
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        if weight.dtype == "float32":
            weight.assign((rng.normal(size=weight.shape) * 0.3).astype("float32"))
    return model


def op_codes(path):
    """(builtin op names, custom op names) of a .tflite file, read from its flatbuffer with the schema bindings
    LiteRT ships (no cudnn_port code)."""
    from ai_edge_litert import schema_py_generated as fb

    with open(path, "rb") as f:
        model = fb.Model.GetRootAs(f.read(), 0)
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    return ({names[max(c.BuiltinCode(), c.DeprecatedBuiltinCode())] for c in codes if not c.CustomCode()},
            {c.CustomCode().decode() for c in codes if c.CustomCode()})


def reference_outputs(model, inputs):
    """``model``'s outputs on ``inputs`` (a list) with every fused layer's stack computed by the float64 NumPy
    reference (cudnn_port.reference): no TensorFlow path of the fused layers (the functions every artifact is traced
    from) runs, so it judges those artifacts independently. Ordinary layers (Embedding, Dense) are Keras' own."""
    from cudnn_port.judging.stock import ReferenceStack, model_outputs
    from cudnn_port.layer_paths import judged_by
    from cudnn_port.layers import fused_layers
    from cudnn_port.layout import unpack

    judges = {id(layer): ReferenceStack(unpack(layer.spec, layer.opaque_kernel.numpy()))
              for layer in fused_layers(model)}
    with judged_by(judges):
        return model_outputs(model(inputs if len(inputs) > 1 else inputs[0], training=False))


def compile_eagerly(model, *args, **kwargs):
    """``model.compile(*args, **kwargs)`` as a user calls it, then ``fit`` and ``predict`` run eagerly. For the few
    steps a test trains, tracing Keras' train step (each recurrent layer's loop and its gradient) took longer than
    running it: 9.0 s against 3.5 s for test_stock_cells' six-layer model. The file saved is the same: run_eagerly is
    set after compile, so the compile config Keras saves is the user's."""
    model.compile(*args, **kwargs)
    model.run_eagerly = True


def fit_ids_model_and_save(model, folder, target_shape):
    """A model over padded int ids (``Embedding(mask_zero=True)`` first) trained by ``fit`` for one epoch, saved as
    ``model.keras`` and ``model.h5`` in ``folder``: (a right-padded probe batch of 4 x 7 ids, Keras' outputs on it)."""
    ids = np.random.default_rng(0).integers(1, 30, size=(64, 10))
    ids[::3, 6:] = 0  # right-padded rows, which the mask skips
    compile_eagerly(model, "adam", "mse")
    model.fit(ids, np.random.default_rng(1).normal(size=(64, *target_shape)), epochs=1, batch_size=16, verbose=0)
    for name in ("model.keras", "model.h5"):
        model.save(folder / name)
    probe = np.random.default_rng(2).integers(1, 30, size=(4, 7)).astype("int32")
    probe[1, 3:] = 0
    probe[3, 5:] = 0
    return probe, np.asarray(model.predict(probe, verbose=0))


def onnx_and_tflite_outputs(out, probe):
    """[(OUT/model.onnx's first output in onnxruntime, "onnx"), (OUT/model.tflite's in LiteRT, "tflite")] on
    ``probe``, run by the runtimes themselves (no cudnn_port code)."""
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    runner = Interpreter(str(out / "model.tflite")).get_signature_runner("serving_default")
    return [(session.run(None, {session.get_inputs()[0].name: probe})[0], "onnx"),
            (next(iter(runner(**{next(iter(runner.get_input_details())): probe}).values())), "tflite")]


def convert_whole(folder, name, want):
    """``cudnn-port convert folder/name folder/out_<name>`` (in this process), which must pass with every
    whole-model artifact: (out, manifest, stdout). ``want`` (Keras' outputs on the probe) must be large enough for
    the 1e-5 + 1e-4 tolerance to tell a wrong artifact apart."""
    assert np.abs(want).max() > 0.05
    out = folder / f"out_{name.replace('.', '_')}"
    done = cli("convert", folder / name, out)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    artifacts = set(manifest["model_artifacts"])
    assert manifest["parity"]["passed"] and {"saved_model", "graphdef", "onnx", "tflite"} <= artifacts, artifacts
    return out, manifest, done.stdout


def assert_runtimes_match_keras(out, probe, want, openvino=True):
    """OUT/model.onnx in onnxruntime (and in OpenVINO, unless ``openvino`` is False) and OUT/model.tflite in LiteRT,
    run by the runtimes themselves on ``probe``, each within :data:`WHOLE_TOLERANCE` of ``want`` (Keras' outputs)."""
    results = onnx_and_tflite_outputs(out, probe)
    if openvino:
        import openvino as ov

        compiled = ov.Core().compile_model(str(out / "model.onnx"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        results.append((compiled({0: probe})[compiled.outputs[0]], "openvino"))
    atol, rtol = WHOLE_TOLERANCE
    for got, what in results:
        assert got.shape == want.shape, what
        assert np.all(np.abs(got - want) <= atol + rtol * np.abs(want)), (what, float(np.abs(got - want).max()))


def convert_fitted(files, name):
    """:func:`convert_whole` of ``name`` in the folder of ``files`` (the folder, then what
    :func:`fit_ids_model_and_save` returns), its ONNX and TFLite run against Keras' outputs on the probe:
    (out, stdout)."""
    folder, probe, want = files
    out, _, stdout = convert_whole(folder, name, want)
    assert_runtimes_match_keras(out, probe, want, openvino=False)
    return out, stdout
