"""The stack road: every cuDNN buffer of a source (a TF checkpoint, a Keras 2 ``.h5``, a PyTorch file) converted
on its own, its artifacts written into an OUT built whole or not at all.

    manifest = convert_stacks("train/model.ckpt", "out/", style="tf1")     # what convert does on this road
    stacks = prepare_stacks(source, flags={...})          # .buffers: everything that can be refused is checked here
    manifest = write_stacks(source, stacks, tmp, style="tf1", formats=default_formats("tf1"))

The buffers, their optimizer slots and their specs are found by :mod:`.buffers`; everything else in the source is
copied unchanged.
"""
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, cast

import numpy as np

from ..checkpoint import Checkpoint, contiguous, write_checkpoint
from ..errors import CudnnPortError, UnsupportedError
from ..exports.keras_rebuild import save_keras3_model
from .. import formats as registry
from ..formats.jobs import StackJob
from ..formats.keras import write_whole_model
from ..layout import unpack
from ..manifest import Manifest, StackRecord, new_manifest
from ..manifest_records import SlotRecord, SpecRecord, StoredCanonicalRecord, StoredTensorRecord
from ..outdir import OutputFolder, finish
from ..paths import sha256
from ..readers import open_source
from ..targets import target_for
from ..progress import say_to
from .buffers import Stack, prepare_stacks, read_finite
from .int8 import quantize_outputs, refuse_nothing_to_quantize

if TYPE_CHECKING:
    from ..formats import Format
    from ..readers.keras_h5 import KerasH5
    from ..source import Source

SLOT_POLICY = ("Optimizer slots of a buffer are converted with the buffer's mapping. Where a format stores one "
               "summed bias b_W + b_R, its slot is b_W's slot: cuDNN's b_W and b_R always receive identical "
               "gradients, so their slots are identical too (the largest difference found is recorded per slot).")


def convert_stacks(path: str, out: "os.PathLike[str] | str", *, style: Optional[str], formats: Optional[Sequence[str]],
                   variable: Optional[str], flags: Dict[str, Any], force: bool, drop_optimizer_slots: bool,
                   allow_nonfinite: bool, prefer_buffer: bool, xla: bool, quantize: Optional[str],
                   say: Callable[[str], None]) -> Manifest:
    """The stack road from ``path`` to a published ``out`` (:func:`cudnn_port.convert` checked the arguments and
    chose this road): the source opened, every stack's spec chosen and buffer checked, the style and formats
    settled, whatever cannot be written refused, all before OUT is built; then the checkpoint, each stack's
    artifacts and (``quantize``) the int8 ONNX models. ``flags``: the spec flags (``mode`` ... ``num_proj``)."""
    src = open_source(path, mode=flags.get("mode"))
    getattr(src, "refuse_undecided", lambda: None)()  # a module whose file leaves its spec to a flag that is missing
    folder = OutputFolder(out, force=force, sources=[os.fspath(path)] + src.files() + _folder(src))
    if getattr(src, "consumes_mode", False):  # the reader applied --mode where its file leaves the mode open
        flags = dict(flags, mode=None)
    stacks = prepare_stacks(src, variable, flags, allow_nonfinite, prefer_buffer, say)
    if style is None and src.default_style == "tf1" and not all(s.chosen_spec.cudnn_computes for s in stacks):
        style = "keras"  # no TF1 cuDNN cell holds a reset-before GRU or another activation; Keras' layers do
    style = style or src.default_style
    odd = next((s for s in stacks if not s.chosen_spec.cudnn_computes), None)
    if odd is not None and style in ("tf1", "pytorch"):  # before any work: the checkpoint's names have no such cell
        raise UnsupportedError(f"{odd.variable}: a {odd.chosen_spec.describe()} has no {style} cell (they compute "
                               "cuDNN's: reset-after GRU, tanh, sigmoid gates); use --style keras")
    explicit, formats = formats is not None, formats or default_formats(style)
    if quantize and "onnx" not in formats:
        raise CudnnPortError("--quantize int8 quantizes the ONNX models, but --formats leaves onnx out")
    if quantize:
        refuse_nothing_to_quantize([s.chosen_spec for s in stacks])
    refused = refusals(stacks, formats) if explicit else []
    if refused:
        raise CudnnPortError(f"{refused[0]}; leave it out of --formats")

    def write(tmp):
        manifest = write_stacks(src, stacks, tmp, style=style, formats=formats, drop_slots=drop_optimizer_slots,
                                xla=xla, allow_nonfinite=allow_nonfinite, say=say)
        if quantize:
            quantize_outputs(manifest, tmp, say)
        return finish(manifest, tmp)

    return folder.build(write, say)


def _folder(src):
    """A checkpoint's folder, which is its source folder however SOURCE names it (prefix, index or folder): OUT
    must not lie inside it."""
    return [os.path.dirname(os.path.abspath(src.prefix))] if isinstance(src, Checkpoint) else []


def default_formats(style: str) -> tuple:
    """What ``convert`` writes for ``style`` when --formats is not given
    (:func:`cudnn_port.formats.default_formats`)."""
    return registry.default_formats(style if style in registry.formats() else None)


def artifact_paths(fmt: "Format", label: str, several: bool = False, layer_dir: Optional[str] = None) -> Dict[str, str]:
    """{artifact key: path inside OUT} of format ``fmt`` for the stack named ``label``."""
    if layer_dir:
        return {a.key: f"{layer_dir}/{label}/{a.where(label)}" for a in fmt.artifacts}
    return {a.key: a.where(label, several) for a in fmt.artifacts}


def refusals(stacks: Sequence[Stack], formats: Sequence[str]) -> List[str]:
    """Why some of ``formats`` cannot hold some of ``stacks``: one phrase per (format, stack)."""
    return [f"{name} cannot hold {stack.variable} ({why})" for name in formats for stack in stacks
            for why in [registry.refusal(name, stack.chosen_spec)] if why]


def write_stacks(source: "Source", stacks: Sequence[Stack], tmp: str, *, style: str, formats: Sequence[str],
                 drop_slots: bool = False, layer_dir: Optional[str] = None, xla: bool = False,
                 allow_nonfinite: bool = False, say: Optional[Callable[[str], None]] = None,
                 batch: Optional[int] = None) -> Manifest:
    """Write OUT's checkpoint and each stack's artifacts into ``tmp``; return the manifest (not yet written:
    :func:`cudnn_port.outdir.finish` hashes and writes it). ``layer_dir``: put each stack's artifacts under
    ``{layer_dir}/{label}/`` (a whole-model export keeps the top level for the whole model); ``batch``: the batch
    the whole model declares, where its layers' artifacts that take a batch start (TFLite)."""
    say = say_to(say)
    owned = {s.variable for s in stacks} | {slot for s in stacks for slot in s.slots}
    manifest = new_manifest(source.prefix, source.format, source.names_note, formats, style)
    dropped: List[str] = []
    manifest.update(slot_policy=SLOT_POLICY, name_map={}, copied=[], dropped=dropped, replaced={})
    if "saved_model" in formats:
        manifest.saved_model_xla = xla
    for stack in stacks:
        manifest.stacks.append(_write_stack_artifacts(source, stack, tmp, style, formats, layer_dir,
                                                      {"xla": xla, "batch": batch}, several=len(stacks) > 1,
                                                      manifest=manifest, say=say))
        if drop_slots:
            dropped += stack.slots
    if "keras" in formats and source.model_config:
        rebuilt = cast("KerasH5", source)  # a model config is a Keras 2 .h5 file's (readers.keras_h5)
        write_whole_model(tmp, lambda path: save_keras3_model(rebuilt, path), manifest, say)
    items = _checkpoint_items(source, stacks, manifest, style, owned, drop_slots, allow_nonfinite)
    total = sum(int(np.prod(shape)) for name, shape in source.shapes.items() if name not in dropped) * 4

    def shard_done(done):
        if total > 2 ** 27:
            say(f"checkpoint: {done / 2**20:.0f} of ~{total / 2**20:.0f} MiB")

    say("writing checkpoint/")
    with ThreadPoolExecutor(1) as pool:  # hash the source while converting (hashlib releases the GIL)
        source_hashes = pool.map(lambda f: (os.path.basename(f), sha256(f)), source.files())
        write_checkpoint(os.path.join(tmp, "checkpoint"), items, progress=shard_done)
        manifest.source.files = dict(source_hashes)
    for warning in manifest.warnings:
        say(f"warning: {warning}")
    return manifest


def _write_stack_artifacts(source, stack, tmp, style, formats, layer_dir, options, several, manifest, say):
    entry = StackRecord(variable=stack.variable, prefix=stack.prefix, label=stack.label,
                        spec=SpecRecord.of(stack.spec.to_dict()), param_count=stack.size, spec_source=stack.how)
    if stack.warning:
        manifest.warnings.append(stack.warning)
    scheme = getattr(target_for(style, source.shapes, stack.prefix), "scheme", None)
    if scheme:
        entry.scheme = scheme
    if stack.stored:
        worst = max((a.get("max_abs_diff", np.inf) for a in stack.stored.values()), default=0.0)
        entry.stored_canonical = StoredCanonicalRecord(count=len(stack.stored), max_abs_diff=worst,
                                                       agree=all(a["agrees"] for a in stack.stored.values()))
    canon = unpack(stack.spec, stack.blob)
    for name in formats:
        fmt = registry.get(name)
        if fmt.write is None:  # the checkpoint: written for every stack at once
            continue
        rels = artifact_paths(fmt, stack.label, several, layer_dir)
        why = fmt.cannot_hold(stack.spec)
        if why:  # a default format that cannot hold this stack (an explicit one is refused before writing)
            manifest.warnings.append(f"{', '.join(rels.values())} not written: {why}")
            continue
        for rel in rels.values():
            say(f"writing {rel}")
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
        details = fmt.write(StackJob(stack.spec, canon, stack.label, options),
                            {k: os.path.join(tmp, rel) for k, rel in rels.items()})
        entry.artifacts.update(rels)
        entry.record(details or {}, own=fmt.records)
    return entry


def _checkpoint_items(source, stacks, manifest, style, owned, drop_slots, allow_nonfinite):
    """(name, array, dtype) for OUT/checkpoint: the style's tensors, one pseudo-layer at a time, for each buffer and
    each kept slot, then every other variable unchanged."""
    converted = set()
    for stack, entry in zip(stacks, manifest.stacks):
        target = target_for(style, source.shapes, stack.prefix)
        sources = [(stack.variable, "")] + [(s, s[len(stack.variable) + 1:]) for s in stack.slots if not drop_slots]
        for name_in, suffix in sources:
            blob = stack.blob if not suffix else read_finite(source, name_in, allow_nonfinite)
            canon = unpack(stack.spec, blob)
            names = manifest.name_map[name_in] = []
            for layer, direction, params in canon.pseudo_layers():
                for name, value in target.write_layer(stack.spec, stack.prefix, layer, direction, params,
                                                      slot=bool(suffix)).items():
                    name = f"{name}/{suffix}" if suffix else name
                    if name in stack.stored:
                        manifest.replaced[name] = StoredTensorRecord.of(stack.stored[name])
                    names.append(name)
                    converted.add(name)
                    yield name, contiguous(value), source.dtypes[name_in]
            if suffix:
                gap = max(float(np.max(np.abs(p.b_W - p.b_R), initial=0.0)) for p in canon.layers)
                entry.slots[name_in] = SlotRecord(targets=names, max_abs_b_W_minus_b_R=gap)
            else:
                entry.targets = names
        stack.blob = None  # let the buffer go once its tensors are written
    for name in source.names:
        if name not in owned and name not in converted:
            manifest.copied.append(name)
            manifest.name_map[name] = [name]
            yield name, source.get(name), source.dtypes[name]
