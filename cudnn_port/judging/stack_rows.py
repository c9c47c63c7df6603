"""verify's rows for one stack: each artifact run as its users run it, against the NumPy reference's outputs.

Every function returns report rows (:func:`cudnn_port.judging.parity.compare`); an artifact that fails to load or
run is a failed row, never a crash; a row that cannot run here (no PyTorch, no GPU) is skipped with the reason.
"""
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from ..exports import OUTPUT_NAMES, io_names
from .int8 import int8_rows
from .parity import compare, failed_row, skipped_row
from ..deps import import_tf
from ..formats import derived_keys, stack_runtimes
from ..formats.jobs import StackJob
from ..formats.pytorch import torch_modules
from ..layout import pack
from ..tf_graph import cudnn_forward
from .stock import keras_layers, tf1_cells

if TYPE_CHECKING:
    from ..canonical import CanonicalRNN
    from ..layout import RNNSpec
    from ..manifest import Manifest, StackRecord
    import numpy as np


def checkpoint_judge(manifest: "Manifest", out: str, stack: "StackRecord", spec: "RNNSpec",
                     batch: "Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]", want: "List[Optional[np.ndarray]]",
                     atol: float, rtol: float) -> Dict[str, Any]:
    """OUT/checkpoint restored by name into the stock components of its style, against the reference."""
    x, lengths, h, c = batch
    style, prefix, ckpt_dir = manifest.style, stack.prefix, os.path.join(out, "checkpoint")
    name = f"checkpoint ({style} style)"
    try:
        if style == "tf1":
            got = tf1_cells(spec, prefix, ckpt_dir, x, lengths, h, c, legacy=stack.scheme == "legacy")
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
        state = {n[len(start):]: stored.get_tensor(n) for n in stack.targets}
        try:
            return compare(name, torch_modules(spec, state, x, lengths, h, c), want, atol, rtol)
        except ImportError:
            return skipped_row(name, "PyTorch is not installed (pip install torch)")
    except Exception as e:  # a checkpoint that fails to restore is a failed check
        return failed_row(name, e)


def stack_artifact_rows(out: str, stack: "StackRecord", spec: "RNNSpec", canon: "CanonicalRNN",
                        batch: "Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]",
                        want: "List[Optional[np.ndarray]]", want_zero: "List[Optional[np.ndarray]]",
                        atol: "Tuple[float, float]", rtol: float, say: Callable[[str], None]) -> List[Dict[str, Any]]:
    """Every artifact of the stack (:mod:`cudnn_port.formats`), in every runtime its format names, called every way
    its users call it: with states fed (judged against ``want``, within ``atol[0]``) and with none (zero states:
    ``want_zero``, within ``atol[1]``), as the artifact takes them; then the int8 model, if any. A row whose atol
    is not ``atol[0]`` records it (``"atol"``)."""
    x, lengths, h, c = batch
    names_in, _ = io_names(spec)
    fed = dict(zip(names_in, (x, lengths, h, c)))
    plain = {"inputs": x, "sequence_lengths": lengths}  # the states left out: zeros
    arts, rows = stack.artifacts, []
    for key, rel, fmt, artifact, runtime, missing in stack_runtimes(arts):
        calls = {"none": [("", plain, want_zero, atol[1])], "required": [("", fed, want, atol[0])],
                 "optional": [(", states fed", fed, want, atol[0]),
                              (", no states", plain, want_zero, atol[1])]}[artifact.states]
        name = artifact.label or key
        where = f"{name} ({runtime.name})" if len(fmt.runtimes) > 1 or name == key else name
        labels = [where + suffix for suffix, _, _, _ in calls]
        if missing:
            rows += [skipped_row(label, f"{missing[0]} is not installed") for label in labels]
            continue
        say(f"{stack.variable}: {where}")
        try:
            run = runtime.open(os.path.join(out, rel), StackJob(spec))  # loaded once, called the ways users call it
        except Exception as e:  # an artifact that fails to load is a failed check, not a crash
            rows += [failed_row(label, e) for label in labels]
            continue
        for label, (_, feeds, judge, tol) in zip(labels, calls):
            try:
                judge = judge[:1] if runtime.outputs_only else judge
                rows.append(compare(label, run(feeds).ordered(OUTPUT_NAMES[:len(judge)]), judge, tol, rtol))
                if tol != atol[0]:
                    rows[-1]["atol"] = tol
            except Exception as e:  # an artifact that fails to run is a failed check, not a crash
                rows.append(failed_row(label, e))
    if any(key in arts for key in derived_keys("int8")):
        say(f"{stack.variable}: onnx int8")
        rows += int8_rows(out, arts, spec, canon, fed, want, plain, want_zero)
    return rows


def gpu_row(spec: "RNNSpec", canon: "CanonicalRNN", batch: "Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]",
            want: "List[Optional[np.ndarray]]", atol: float, rtol: float) -> Dict[str, Any]:
    """The fused cuDNN op itself (one CudnnRNNV3 call on the judge's buffer), where TensorFlow sees a GPU, with
    TensorFloat-32 off (TensorFlow allows it by default on Ampere and newer, and it moves cuDNN's fp32 output by
    up to ~3e-3 on small stacks, 7.5e-2 on large ones). Its tolerance ``atol`` is the case's own: at least 4x its
    fp32 floor (:func:`.stack_case.case_floor`, the reference's math in fp32 against float64 on this batch),
    never derived from the artifacts' errors."""
    name = "cudnn (GPU, TF32 off)"
    if not spec.cudnn_computes:
        return skipped_row(name, f"cuDNN does not compute a {spec.cell_name}")
    try:
        tf = import_tf()
        gpus = tf.config.list_logical_devices("GPU")
    except Exception:  # noqa: BLE001 (no TensorFlow: nothing to run the op with)
        gpus = []
    if not gpus:
        return skipped_row(name, "TensorFlow sees no GPU")

    x, lengths, h, c = batch
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        with tf.device(gpus[0].name):
            got = cudnn_forward(spec, tf.constant(pack(canon, "float32")), x, lengths, h, c)
        row = compare(name, [None if t is None else t.numpy() for t in got], want, atol, rtol,
                      note=f"TF32 off; atol {atol:.1e}: this case's own, at least 4x its fp32 floor")
    except Exception as e:  # a GPU that cannot run the op is a failed check, not a crash
        row = failed_row(name, e)
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
    return row
