"""verify's rows for one stack: each artifact run as its users run it, against the NumPy reference's outputs.

Every function returns report rows (:func:`cudnn_port.parity.compare`); an artifact that fails to load or run is a
failed row, never a crash; a row that cannot run here (no PyTorch, no GPU) is skipped with the reason.
"""
import os

import numpy as np

from ..exports import io_names
from ..exports.runners import RUNNERS
from .parity import compare, failed_row


def _skip(name, why):
    return {"artifact": name, "max_abs": None, "max_rel": None, "passed": None, "note": f"skipped: {why}"}


def checkpoint_judge(manifest, out, stack, spec, batch, want, atol, rtol):
    """OUT/checkpoint restored by name into the stock components of its style, against the reference."""
    from ..deps import import_tf
    from .stock import keras_layers, tf1_cells, torch_modules

    x, lengths, h, c = batch
    style, prefix, ckpt_dir = manifest.get("style"), stack.get("prefix", ""), os.path.join(out, "checkpoint")
    name = f"checkpoint ({style} style)"
    try:
        if style == "tf1":
            got = tf1_cells(spec, prefix, ckpt_dir, x, lengths, h, c, legacy=stack.get("scheme") == "legacy")
            return dict(compare(name, got, want, atol, rtol), judge_of_artifact="TF1 cells restored by name")
        tf = import_tf()
        stored = tf.train.load_checkpoint(tf.train.latest_checkpoint(ckpt_dir))
        if style == "keras":
            def scope(layer, direction):
                return f"{prefix + '/' if prefix else ''}layer_{layer}/{'backward' if direction else 'forward'}"

            tensors = {f"{scope(k, d)}/{v}": stored.get_tensor(f"{scope(k, d)}/{v}")
                       for k in range(spec.num_layers) for d in range(spec.num_dirs)
                       for v in ("kernel", "recurrent_kernel", "bias")}
            return compare(name, keras_layers(spec, tensors, scope, x, lengths, h, c), want, atol, rtol)
        start = f"{prefix}/" if prefix else ""
        state = {n[len(start):]: stored.get_tensor(n) for n in stack["targets"]}
        try:
            return compare(name, torch_modules(spec, state, x, lengths, h, c), want, atol, rtol)
        except ImportError:
            return _skip(name, "PyTorch is not installed (pip install torch)")
    except Exception as e:  # a checkpoint that fails to restore is a failed check
        return failed_row(name, e)


def stack_artifact_rows(out, stack, spec, canon, batch, want, want_zero, atol, rtol, say):
    """SavedModel (both signatures), GraphDef, ONNX (fed states and fed none), Keras and PyTorch files."""
    x, lengths, h, c = batch
    names_in, names_out = io_names(spec)
    feeds = dict(zip(names_in, (x, lengths, h, c)))
    arts, rows = stack.get("artifacts", {}), []

    def row(name, run, judge_of=None):
        say(f"{stack['variable']}: {name}")
        try:
            rows.append(compare(name, run(), want if judge_of is None else judge_of, atol, rtol))
        except Exception as e:  # an artifact that fails to load or run is a failed check, not a crash
            rows.append(failed_row(name, e))

    plain = {"inputs": x, "sequence_lengths": lengths}  # the states left out: zeros
    for kind, labels in (("saved_model", ("saved_model [with_initial_state]", "saved_model [serving_default]")),
                         ("graphdef", ("graphdef",)),
                         ("onnx", ("onnx (onnxruntime), states fed", "onnx (onnxruntime), no states"))):
        if kind not in arts:
            continue
        try:
            run = RUNNERS[kind](os.path.join(out, arts[kind]), spec)  # loaded once, called the ways users call it
        except Exception as e:  # an artifact that fails to load is a failed check, not a crash
            rows += [failed_row(label, e) for label in labels]
            continue
        for label, (fed, judge) in zip(labels, ((feeds, want), (plain, want_zero))):
            row(label, lambda: run(fed), judge)
    if "keras" in arts:
        row("keras (.keras file)", lambda: _keras_file(os.path.join(out, arts["keras"]), x, lengths), want_zero[:1])
    if "pytorch" in arts:
        try:
            import torch  # noqa: F401
        except ImportError:
            rows.append(_skip("pytorch (.safetensors)", "PyTorch is not installed (pip install torch)"))
        else:
            row("pytorch (.safetensors)", lambda: _torch_file(os.path.join(out, arts["pytorch"]), spec, batch))
    if "onnx_int8" in arts:
        from .int8 import int8_row

        say(f"{stack['variable']}: onnx int8")
        rows.append(int8_row("onnx int8 (onnxruntime)", os.path.join(out, arts["onnx_int8"]), spec, canon, feeds,
                             want))
    return rows


def _keras_file(path, x, lengths):
    """The per-stack .keras file loaded by plain Keras, run layer by layer with a right-padded mask."""
    import keras

    model = keras.saving.load_model(path, compile=False)
    mask = np.arange(x.shape[1])[None, :] < np.asarray(lengths)[:, None]
    h = x
    for layer in model.layers[1:]:
        h = layer(h, mask=mask)
    return [np.asarray(h) * mask[..., None]]


def _torch_file(path, spec, batch):
    from safetensors.numpy import load_file

    from .stock import torch_modules

    return torch_modules(spec, load_file(path), *batch)


def gpu_row(spec, canon, batch, want, atol, rtol):
    """The fused cuDNN op itself (one CudnnRNNV3 call on the judge's buffer), where TensorFlow sees a GPU, with
    TensorFloat-32 off (TensorFlow allows it by default on Ampere and newer, and it moves cuDNN's fp32 output by
    up to ~3e-3 on small stacks, 7.5e-2 on large ones). Its tolerance is the fp32 floor of the case: ``atol``."""
    from ..deps import import_tf

    name = "cudnn (GPU, TF32 off)"
    try:
        tf = import_tf()
        gpus = tf.config.list_logical_devices("GPU")
    except Exception:  # noqa: BLE001 (no TensorFlow: nothing to run the op with)
        gpus = []
    if not gpus:
        return _skip(name, "TensorFlow sees no GPU")
    from ..layout import pack
    from ..tf_graph import cudnn_forward

    x, lengths, h, c = batch
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        with tf.device(gpus[0].name):
            got = cudnn_forward(spec, tf.constant(pack(canon, "float32")), x, lengths, h, c)
        row = compare(name, [None if t is None else t.numpy() for t in got], want, atol, rtol,
                      note=f"TF32 off; atol {atol:.1e} = 4x the fp32 CPU artifacts' error (the fp32 floor)")
    except Exception as e:  # a GPU that cannot run the op is a failed check, not a crash
        row = failed_row(name, e)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
    return row
