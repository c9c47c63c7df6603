"""Find the cuDNN buffers of a checkpoint, work out their specs, and convert them.

Library entry points (the CLI is a thin shell over them)::

    report = inspect_checkpoint("train/model.ckpt")                  # what is there, what fits
    manifest = convert("train/model.ckpt", "out/", style="tf1")      # writes out/checkpoint/, out/manifest.json

A buffer is a variable whose name ends in ``opaque_kernel`` (or the one named by ``variable=``). Variables
``{buffer}/…`` of the buffer's shape are its optimizer slots (``/Adam``, ``/Adam_1``, ``/Momentum``, object-based
``/.OPTIMIZER_SLOT/…``) and are converted with the same mapping. Everything else is copied unchanged.
"""
import datetime
import json
import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from . import __version__
from .checkpoint import sha256, write_checkpoint
from .errors import CudnnPortError
from .infer import SPEC_VARIABLE, _ranked, candidates, choose, clues_from, differing_flags, spec_from_vector
from .layout import FLOAT_DTYPES, unpack
from .readers import open_source
from .readers.saved_model import is_saved_model
from .canonical import LayerParams
from .targets import STYLES, target_for, tf1

EXPORTS = ("saved_model", "graphdef", "onnx")
FORMATS = ("checkpoint", "keras", "pytorch") + EXPORTS
DEFAULT_FORMATS = {"tf1": ("checkpoint",) + EXPORTS, "keras": ("checkpoint", "keras") + EXPORTS,
                   "pytorch": ("checkpoint", "pytorch") + EXPORTS}
ARTIFACT_PATHS = {"keras": "keras/{label}.keras", "pytorch": "pytorch/{label}.safetensors",
                  "saved_model": "saved_model{suffix}", "graphdef": "frozen_graph{suffix}.pb", "onnx": "model{suffix}.onnx"}
SLOT_POLICY = ("Optimizer slots of a buffer are converted with the buffer's mapping. Where a format stores one "
               "summed bias b_W + b_R, its slot is b_W's slot: cuDNN's b_W and b_R always receive identical "
               "gradients, so their slots are identical too (the largest difference found is recorded per slot).")
BUFFER_SUFFIX = "opaque_kernel"


@dataclass
class Stack:
    """One cuDNN buffer of a checkpoint and what belongs to it."""

    variable: str
    size: int
    dtype: str
    slots: list = field(default_factory=list)
    spec: object = None
    how: str = ""
    blob: object = None

    @property
    def prefix(self):
        return self.variable.rsplit("/", 1)[0] if "/" in self.variable else ""

    @property
    def label(self):
        return self.prefix.replace("/", "__") or "rnn"


def find_stacks(ckpt, variable=None):
    """The Stacks of ``ckpt``: every buffer, or just ``variable``. Specs are not chosen yet."""
    if variable is not None:
        if variable not in ckpt.shapes:
            near = [n for n in ckpt.names if n.endswith(BUFFER_SUFFIX)] or ckpt.names[:5]
            raise CudnnPortError(f"unknown variable {variable}; the checkpoint has e.g. {', '.join(near)} "
                                 "(cudnn-port inspect lists them all)")
        names = [variable]
    else:
        names = [n for n in ckpt.names if n.endswith(BUFFER_SUFFIX)
                 and not any(n.startswith(other + "/") for other in ckpt.names if other.endswith(BUFFER_SUFFIX))]
        if not names and hasattr(ckpt, "nothing_found"):
            raise CudnnPortError(ckpt.nothing_found())
        if not names:
            raise CudnnPortError(f"no cuDNN buffer in {ckpt.prefix}: no variable name ends in {BUFFER_SUFFIX}; "
                                 "name it with --variable NAME (cudnn-port inspect lists the variables)")
    stacks = []
    for name in names:
        shape, dtype = ckpt.shapes[name], ckpt.dtypes[name]
        if len(shape) != 1:
            raise CudnnPortError(f"{name} has shape {list(shape)}, but a cuDNN buffer is a flat vector; "
                                 "pick the buffer with --variable NAME")
        if dtype not in FLOAT_DTYPES:
            raise CudnnPortError(f"{name} has dtype {dtype}, but a cuDNN buffer is one of {', '.join(FLOAT_DTYPES)}; "
                                 "pick the buffer with --variable NAME")
        slots = [n for n in ckpt.names if n.startswith(name + "/") and ckpt.shapes[n] == shape]
        stacks.append(Stack(name, shape[0], dtype, slots))
    return stacks


def _clues(ckpt, stack):
    clues = clues_from(stack.variable, {n: s for n, s in ckpt.shapes.items() if n not in stack.slots})
    if stack.variable in ckpt.specs:  # the source states the spec outright
        clues.exact, clues.exact_how = ckpt.specs[stack.variable], ckpt.describe(stack.variable)
        return clues
    stored = f"{stack.prefix}/{SPEC_VARIABLE}" if stack.prefix else SPEC_VARIABLE
    if stored in ckpt.shapes:  # a cudnn_port.layers layer saved its spec beside its buffer
        clues.exact = spec_from_vector(ckpt.get(stored), stack.dtype)
        clues.exact_how = f"stored beside it in {stored} by a cudnn_port.layers layer"
        return clues
    for style in STYLES.values():
        clues.exact = clues.exact or style.detect(ckpt.shapes, stack.prefix)
    return clues


def inspect_checkpoint(path, variable=None, **flags):
    """What ``path`` holds and how each buffer would convert; a JSON-ready dict.

    flags: mode, num_layers, num_units, input_size, bidirectional (None = not given).
    """
    if is_saved_model(os.fspath(path)):
        return _inspect_saved_model(os.fspath(path))
    ckpt = open_source(path)
    report = {"checkpoint": ckpt.prefix, "format": ckpt.format, "default_style": ckpt.default_style,
              "variables": [{"name": n, "shape": list(ckpt.shapes[n]), "dtype": ckpt.dtypes[n]} for n in ckpt.names],
              "stacks": []}
    stacks = find_stacks(ckpt, variable)
    for stack in stacks:
        clues = _clues(ckpt, stack)
        found = _ranked(candidates(stack.size, dtype=stack.dtype, **flags), clues)
        entry = {"variable": stack.variable, "size": stack.size, "dtype": stack.dtype, "slots": stack.slots,
                 "found": _found(ckpt, stack, clues), "candidate_count": len(found),
                 "candidates": [dict(s.to_dict(), score=clues.score(s), reasons=clues.reasons(s)) for s in found[:20]]}
        try:
            spec, how = choose(stack.variable, stack.size, stack.dtype, clues, **flags)
            entry.update(spec=spec.to_dict(), how=how, flags=spec.flags(),
                         plan=_plan(ckpt, stack, spec, several=len(stacks) > 1))
        except CudnnPortError as e:
            entry.update(spec=None, problem=str(e), settle_with=differing_flags(found))
        report["stacks"].append(entry)
    return report


def _inspect_saved_model(path):
    from .readers import saved_model as graphs

    proto = graphs.load_proto(path)
    nodes = graphs.find_nodes(proto)
    signatures = sorted({name for meta in proto.meta_graphs for name in meta.signature_def
                         if not name.startswith("__")})
    return {"checkpoint": os.path.abspath(path), "format": f"SavedModel with {len(nodes)} cuDNN nodes",
            "signatures": signatures, "nodes": [dict(n.to_dict(), converts_as=(
                f"{n.spec.describe()}: CPU ops in the SavedModel, fused ONNX {n.spec.mode.upper()} nodes in ONNX"))
                for n in nodes],
            "stacks": [], "plan": {"artifacts": ["saved_model", "model.onnx"]},
            "variables": []}


def _found(ckpt, stack, clues):
    """What the source holds for ``stack``, in words."""
    if stack.variable in ckpt.specs:
        return ckpt.describe(stack.variable)
    words = f"cuDNN opaque buffer ({ckpt.format} checkpoint)"
    if clues.exact is not None:
        scheme = "older names with bias_cudnn_0/1" if tf1.uses_legacy_names(ckpt.shapes, stack.prefix) else \
            "current names"
        words += f", with TF1 canonical tensors beside it ({scheme}); they are compared with the buffer"
    if stack.slots:
        words += f"; optimizer slots {', '.join(s[len(stack.variable) + 1:] for s in stack.slots)} convert with it"
    return words


def _plan(ckpt, stack, spec, several=False, style=None):
    """How ``stack`` converts by default: the style, its tensor names for layer 0, and the artifacts."""
    style = style or ckpt.default_style
    target = target_for(style, ckpt.shapes, stack.prefix)
    G, H = spec.num_gates, spec.num_units
    zeros = LayerParams(W=np.zeros((G, H, spec.input_size), spec.dtype), R=np.zeros((G, H, H), spec.dtype),
                        b_W=np.zeros((G, H), spec.dtype), b_R=np.zeros((G, H), spec.dtype))
    names = list(target.write_layer(spec, stack.prefix, 0, 0, zeros))
    if getattr(ckpt, "whole_model", False):  # a Keras model: its artifacts cover the whole model
        return {"style": style, "scheme": None, "layer_0_names": names,
                "artifacts": ["checkpoint", "saved_model", "frozen_graph.pb", "model.onnx", "model_parity.json"]}
    kinds = [k for k in DEFAULT_FORMATS[style] if k != "checkpoint"]
    return {"style": style, "scheme": getattr(target, "scheme", None), "layer_0_names": names,
            "artifacts": [ARTIFACT_PATHS[k].format(label=stack.label, suffix=f"_{stack.label}" if several else "")
                          for k in kinds]
            + (["keras/model.keras"] if "keras" in kinds and getattr(ckpt, "model_config", None) else [])}


def _read_buffer(ckpt, name, allow_nonfinite):
    value = ckpt.get(name)
    if not allow_nonfinite and not np.isfinite(value).all():
        bad = int(np.size(value) - np.isfinite(value).sum())
        raise CudnnPortError(f"{name} holds {bad} NaN/Inf values; the training run diverged, or pass "
                             "--allow-nonfinite to convert them as they are")
    return value


def _prepare_out(out, force):
    """Refuse to overwrite anything but an earlier cudnn-port output (and that only with force)."""
    out = os.path.abspath(out)
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise CudnnPortError(f"{out} exists and is a file; choose a folder name for the output")
        if os.listdir(out):
            if not force:
                raise CudnnPortError(f"{out} exists and is not empty; choose a new folder, or pass --force to "
                                     "replace an earlier cudnn-port output")
            if not _is_ours(out):
                raise CudnnPortError(f"{out} is not a cudnn-port output (no manifest.json of ours), so --force "
                                     "will not replace it; choose a new folder")
    parent = os.path.dirname(out)
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise CudnnPortError(f"{parent} is a file, so {out} cannot be created; choose another output folder")
    os.makedirs(parent, exist_ok=True)
    return out


def _is_ours(folder):
    try:
        with open(os.path.join(folder, "manifest.json")) as f:
            return json.load(f).get("tool") == "cudnn-port"
    except (OSError, ValueError, AttributeError):
        return False


def _publish(tmp, out):
    """Move the finished ``tmp`` into place at ``out`` (an earlier output of ours is replaced whole)."""
    old = None
    if os.path.exists(out):
        if os.listdir(out):
            old = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.old-{uuid.uuid4().hex[:8]}")
            os.rename(out, old)
        else:
            os.rmdir(out)
    os.rename(tmp, out)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def convert(source, out, *, style=None, formats=None, variable=None, mode=None, num_layers=None, num_units=None,
            input_size=None, bidirectional=None, force=False, drop_optimizer_slots=False, allow_nonfinite=False,
            xla=True, progress=None):
    """Convert every cuDNN stack of ``source`` into ``style``'s canonical tensors under ``out``.

    ``source``: a TensorFlow checkpoint (prefix, ``.index`` or folder; default style tf1) or a Keras 2 ``.h5``
    file with CuDNNLSTM / CuDNNGRU layers (default style keras; with the keras format a full-model file is
    also rebuilt whole in Keras 3 as ``out/keras/model.keras``).

    Writes ``out/checkpoint/`` (name-based; ``tf.train.latest_checkpoint`` finds it; other variables copied
    unchanged), the artifacts in ``formats`` (``keras``: ``out/keras/<stack>.keras``; ``pytorch``:
    ``out/pytorch/<stack>.safetensors``; ``saved_model``: ``out/saved_model/``; ``graphdef``:
    ``out/frozen_graph.pb``; ``onnx``: ``out/model.onnx``; with several stacks the last three get a
    ``_<stack>`` suffix) and ``out/manifest.json``. Output appears whole or not at all. ``xla=False`` writes
    the SavedModel in plain ops, for runtimes without XLA:CPU JIT (see :mod:`cudnn_port.exports.tensorflow`).
    Returns the manifest dict. ``progress(message)`` receives progress lines.
    """
    if style is not None and style not in STYLES:
        raise CudnnPortError(f"unknown style {style!r}; choose one of {', '.join(STYLES)}")
    unknown = [f for f in formats or () if f not in FORMATS]
    if unknown:
        raise CudnnPortError(f"unknown format {unknown[0]!r}; choose from {', '.join(FORMATS)}")
    say = progress or (lambda message: None)
    if is_saved_model(os.fspath(source)):
        return _convert_saved_model(os.fspath(source), out, formats, force, say)
    if os.fspath(source).endswith(".keras") and os.path.isfile(source):
        from .model_export import export_keras_file

        if formats:
            raise CudnnPortError("a .keras model is exported whole (checkpoint, saved_model, graphdef, onnx and each "
                                 "fused layer), so --formats does not apply; leave it out")
        return export_keras_file(source, out, style=style or "keras", force=force, xla=xla, progress=progress)
    ckpt = open_source(source)
    style = style or ckpt.default_style
    formats = tuple(formats or DEFAULT_FORMATS[style])
    out = _prepare_out(out, force)
    flags = dict(mode=mode, num_layers=num_layers, num_units=num_units, input_size=input_size,
                 bidirectional=bidirectional)
    stacks = prepare_stacks(ckpt, variable, flags, allow_nonfinite, say)
    return _build(out, lambda tmp: _write(ckpt, stacks, tmp, style, formats, drop_optimizer_slots, say, xla=xla),
                  say)


def prepare_stacks(ckpt, variable=None, flags=None, allow_nonfinite=False, say=None):
    """The stacks of ``ckpt`` with specs chosen and buffers read: everything that can be refused is checked
    here, before anything is written."""
    stacks = find_stacks(ckpt, variable)
    for stack in stacks:
        stack.spec, stack.how = choose(stack.variable, stack.size, stack.dtype, _clues(ckpt, stack), **(flags or {}))
        stack.blob = _read_buffer(ckpt, stack.variable, allow_nonfinite)
    for stack in stacks:
        (say or (lambda message: None))(f"{stack.variable}: {stack.spec.describe()} ({stack.how})")
    return stacks


def _build(out, write, say):
    """Run ``write(tmp)`` in a temporary sibling of ``out``, then move it into place: whole or not at all."""
    tmp = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.tmp-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    try:
        manifest = write(tmp)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"wrote {out}")
    return manifest


GRAPH_FORMATS = ("saved_model", "onnx")


def _convert_saved_model(source, out, formats, force, say):
    """A SavedModel holding cuDNN nodes -> OUT/saved_model (each node replaced by CPU ops), OUT/model.onnx
    (fused ONNX LSTM/GRU nodes for them, tf2onnx for the rest), OUT/manifest.json."""
    from .readers import saved_model as graphs

    formats = tuple(formats or GRAPH_FORMATS)
    other = [f for f in formats if f not in GRAPH_FORMATS]
    if other:
        raise CudnnPortError(f"a SavedModel converts to {' and '.join(GRAPH_FORMATS)}, not {other[0]}; its weights "
                             "live in the graph's variables, so pass --formats saved_model,onnx (the default)")
    proto = graphs.load_proto(source)
    nodes = graphs.find_nodes(proto)
    if not nodes:
        raise CudnnPortError(f"{source} holds no CudnnRNN/CudnnRNNV2/CudnnRNNV3 node, so it already runs on CPU; "
                             "nothing to convert")
    out = _prepare_out(out, force)
    for node in nodes:
        say(f"{node.name} ({node.op}): {node.spec.describe()}")

    def write(tmp):
        manifest = _manifest_head(source, f"SavedModel with {len(nodes)} cuDNN node{'s' * (len(nodes) > 1)}",
                                  "signatures, inputs and outputs keep their names", formats)
        manifest.update(kind="saved_model", nodes=[n.to_dict() for n in nodes])
        if "saved_model" in formats:
            say("writing saved_model/ (cuDNN nodes replaced by CPU ops)")
            graphs.write_cpu_saved_model(source, os.path.join(tmp, "saved_model"), nodes, proto)
            manifest["model_artifacts"]["saved_model"] = "saved_model"
        if "onnx" in formats:
            from .exports.onnx import write_saved_model_onnx

            say("writing model.onnx (fused ONNX LSTM/GRU nodes in place of cuDNN nodes)")
            write_saved_model_onnx(source, os.path.join(tmp, "model.onnx"))
            manifest["model_artifacts"]["onnx"] = "model.onnx"
        files = [os.path.join(root, f) for root, _, fs in os.walk(source) for f in fs]
        manifest["source"]["files"] = {os.path.relpath(f, source): sha256(f) for f in sorted(files)}
        return _finish(manifest, tmp)

    return _build(out, write, say)


def _manifest_head(source, source_format, names_note, formats, style=None):
    return {"tool": "cudnn-port", "version": __version__,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "source": {"checkpoint": os.path.abspath(source) if os.path.exists(source) else source,  # its path
                       "format": source_format, "files": {}, "names": names_note},
            "style": style, "formats": list(formats), "stacks": [], "model_artifacts": {}}


def _finish(manifest, tmp):
    """Hash every output file into the manifest and write it."""
    manifest["files"] = {}
    for root, _, files in os.walk(tmp):
        for f in sorted(files):
            path = os.path.join(root, f)
            manifest["files"][os.path.relpath(path, tmp)] = sha256(path)
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def _write(ckpt, stacks, tmp, style, formats, drop_slots, say, layer_dir=None, xla=True):
    """Write OUT's checkpoint, per-stack artifacts and manifest into ``tmp``; ``layer_dir``: put each stack's
    artifacts under ``{layer_dir}/{stack}/`` (a whole-model export keeps the top level for the whole model);
    ``xla``: compile the SavedModels' forward pass with XLA."""
    owned = {s.variable for s in stacks} | {slot for s in stacks for slot in s.slots}
    manifest = _manifest_head(ckpt.prefix, ckpt.format, ckpt.names_note, formats, style)
    manifest.update(slot_policy=SLOT_POLICY, name_map={}, copied=[], dropped=[], replaced={})
    if "saved_model" in formats:
        manifest["saved_model_xla"] = xla
    for stack in stacks:
        entry = {"variable": stack.variable, "prefix": stack.prefix, "spec": stack.spec.to_dict(),
                 "param_count": stack.size, "spec_source": stack.how, "targets": [], "slots": {}, "artifacts": {}}
        scheme = getattr(target_for(style, ckpt.shapes, stack.prefix), "scheme", None)
        if scheme:
            entry["scheme"] = scheme
        manifest["stacks"].append(entry)
        suffix = "" if len(stacks) == 1 else f"_{stack.label}"
        canon = unpack(stack.spec, stack.blob)
        for kind in formats:
            if kind != "checkpoint":
                rel = ARTIFACT_PATHS[kind].format(label=stack.label, suffix=suffix)
                if layer_dir:
                    rel = f"{layer_dir}/{stack.label}/{ARTIFACT_PATHS[kind].format(label=stack.label, suffix='')}"
                say(f"writing {rel}")
                entry["artifacts"][kind] = rel
                details = _write_artifact(kind, canon, stack.label, os.path.join(tmp, rel), xla)
                if details:
                    entry.setdefault("graphdef_nodes", details)
        if drop_slots:
            manifest["dropped"] += stack.slots
    if "keras" in formats and getattr(ckpt, "model_config", None):
        from .readers.keras_h5 import save_keras3_model

        say("writing keras/model.keras (the whole model in Keras 3)")
        problem = save_keras3_model(ckpt, os.path.join(tmp, "keras", "model.keras"))
        manifest["model_artifacts"] = {} if problem else {"keras": "keras/model.keras"}
        if problem:
            manifest["warnings"] = [problem]
            say(f"warning: {problem}")

    converted = set()

    def converted_items():
        """The style's tensors, one pseudo-layer at a time, for each buffer and each kept slot."""
        for stack, entry in zip(stacks, manifest["stacks"]):
            target = target_for(style, ckpt.shapes, stack.prefix)
            sources = [(stack.variable, "")] + [(s, s[len(stack.variable) + 1:]) for s in stack.slots if not drop_slots]
            for source, suffix in sources:
                canon = unpack(stack.spec, stack.blob if not suffix else ckpt.get(source))
                names = manifest["name_map"][source] = []
                for layer, direction, params in canon.pseudo_layers():
                    for name, value in target.write_layer(stack.spec, stack.prefix, layer, direction, params,
                                                          slot=bool(suffix)).items():
                        name = f"{name}/{suffix}" if suffix else name
                        if name in ckpt.shapes and name not in owned:  # canonical tensors stored beside the buffer
                            manifest["replaced"][name] = _agreement(ckpt.get(name), value)
                        names.append(name)
                        converted.add(name)
                        yield name, contiguous(value), ckpt.dtypes[source]
                if suffix:
                    gap = max(float(np.max(np.abs(p.b_W - p.b_R), initial=0.0)) for p in canon.layers)
                    entry["slots"][source] = {"targets": names, "max_abs_b_W_minus_b_R": gap}
                else:
                    entry["targets"] = names
            stack.blob = None  # let the buffer go once its tensors are written

    def items():
        yield from converted_items()
        for name in ckpt.names:
            if name not in owned and name not in converted:
                manifest["copied"].append(name)
                manifest["name_map"][name] = [name]
                yield name, ckpt.get(name), ckpt.dtypes[name]

    total = sum(int(np.prod(shape)) for name, shape in ckpt.shapes.items() if name not in manifest["dropped"]) * 4

    def shard_done(done):
        if total > 2 ** 27:
            say(f"checkpoint: {done / 2**20:.0f} of ~{total / 2**20:.0f} MiB")

    say("writing checkpoint/")
    with ThreadPoolExecutor(1) as pool:  # hash the source while converting (hashlib releases the GIL)
        source_hashes = pool.map(lambda f: (os.path.basename(f), sha256(f)), ckpt.files())
        write_checkpoint(os.path.join(tmp, "checkpoint"), items(), progress=shard_done)
        manifest["source"]["files"] = dict(source_hashes)
    return _finish(manifest, tmp)


def _write_artifact(kind, canon, label, path, xla=True):
    """Write one artifact of one stack at ``path``; GraphDef returns its input/output tensor names."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if kind == "keras":
        from .targets import keras as keras_target

        keras_target.save_model(canon, path, name=label)
    elif kind == "pytorch":
        from .targets import pytorch as torch_target

        torch_target.save_file(canon, path)
    elif kind == "onnx":
        from .exports import onnx as onnx_export

        onnx_export.write_onnx(canon, path, name=label)
    else:
        from .exports import tensorflow as tf_export

        if kind == "saved_model":
            tf_export.write_saved_model(canon, path, xla)
        else:
            return tf_export.write_frozen_graph(canon, path)
    return None


def contiguous(value, block=256):
    """``value`` as a C-contiguous array. Transposed 2-D views (canonical kernels are ``W.T``) are copied in
    cache-sized blocks, about 6x faster than NumPy's strided copy for large kernels."""
    value = np.asarray(value)
    if value.ndim != 2 or value.flags.c_contiguous or not value.flags.f_contiguous:
        return np.ascontiguousarray(value)
    out = np.empty(value.shape, value.dtype)
    source = value.T  # C-contiguous
    for i in range(0, source.shape[0], block):
        for j in range(0, source.shape[1], block):
            out[j:j + block, i:i + block] = source[i:i + block, j:j + block].T
    return out


def _agreement(stored, converted):
    """How far a canonical tensor already in the source is from the one converted from the buffer."""
    stored, converted = np.asarray(stored, dtype=np.float64), np.asarray(converted, dtype=np.float64)
    if stored.shape != converted.shape:
        return {"agrees": False, "reason": f"shape {list(stored.shape)} vs {list(converted.shape)}"}
    diff = float(np.max(np.abs(stored - converted), initial=0.0))
    return {"agrees": diff <= 1e-6 * max(1.0, float(np.max(np.abs(converted), initial=0.0))), "max_abs_diff": diff}
