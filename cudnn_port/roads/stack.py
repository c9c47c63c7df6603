"""A source's cuDNN stacks: found, their specs chosen, their buffers read and checked, then written out.

    stacks = prepare_stacks(source, flags={...})          # everything that can be refused is checked here
    manifest = write_stacks(source, stacks, tmp, style="tf1", formats=default_formats("tf1"))

A buffer is a variable whose name ends in ``opaque_kernel`` (or the one named by ``variable=``). Variables
``{buffer}/…`` of the buffer's shape are its optimizer slots (``/Adam``, ``/Adam_1``, ``/Momentum``, object-based
``/.OPTIMIZER_SLOT/…``) and are converted with the same mapping. Everything else is copied unchanged.
"""
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..checkpoint import contiguous, write_checkpoint
from ..errors import CudnnPortError
from ..exports.keras_rebuild import save_keras3_model
from .. import formats as registry
from ..formats.jobs import StackJob
from ..formats.keras import write_whole_model
from ..infer import Clues, choose, clues_from, neighbour_contradiction
from ..stored_spec import SPEC_VARIABLE, spec_from_vector
from ..layout import FLOAT_DTYPES, RNNSpec, unpack
from ..manifest import Manifest, StackRecord, new_manifest
from ..paths import sha256, unique_components
from ..targets import STYLES, target_for, tf1
from ..progress import say_to

if TYPE_CHECKING:
    from ..formats import Format
    from ..source import Source

BUFFER_SUFFIX = "opaque_kernel"
SLOT_POLICY = ("Optimizer slots of a buffer are converted with the buffer's mapping. Where a format stores one "
               "summed bias b_W + b_R, its slot is b_W's slot: cuDNN's b_W and b_R always receive identical "
               "gradients, so their slots are identical too (the largest difference found is recorded per slot).")
SPEC_FLAGS = ("mode", "num_layers", "num_units", "input_size", "bidirectional", "num_proj")


@dataclass
class Stack:
    """One cuDNN buffer of a source and what belongs to it."""

    variable: str
    size: int
    dtype: str
    slots: List[str] = field(default_factory=list)
    spec: Optional[RNNSpec] = None
    how: str = ""
    blob: Optional[np.ndarray] = None
    label: str = ""  # one safe path component naming the stack's artifacts
    stored: Dict[str, dict] = field(default_factory=dict)  # canonical tensors stored beside it: agreement
    warning: str = ""  # a neighbour that contradicts the spec the flags chose

    @property
    def prefix(self) -> str:
        return self.variable.rsplit("/", 1)[0] if "/" in self.variable else ""


def find_stacks(source: "Source", variable: Optional[str] = None) -> List[Stack]:
    """The Stacks of ``source``: every buffer, or just ``variable``. Specs are not chosen yet."""
    if variable is not None:
        if variable not in source.shapes:
            near = [n for n in source.names if n.endswith(BUFFER_SUFFIX)] or source.names[:5]
            raise CudnnPortError(f"unknown variable {variable}; the source has e.g. {', '.join(near[:5])} "
                                 "(cudnn-port inspect lists them all)")
        names = [variable]
    else:
        buffers = [n for n in source.names if n.endswith(BUFFER_SUFFIX)]
        names = [n for n in buffers if not any(n.startswith(other + "/") for other in buffers)]
        if not names:
            raise CudnnPortError(source.nothing_found())
    stacks = []
    for name in names:
        shape, dtype = source.shapes[name], source.dtypes[name]
        if len(shape) != 1:
            raise CudnnPortError(f"{name} has shape {list(shape)}, but a cuDNN buffer is a flat vector; "
                                 "pick the buffer with --variable NAME")
        if dtype not in FLOAT_DTYPES:
            raise CudnnPortError(f"{name} has dtype {dtype}, but a cuDNN buffer is one of {', '.join(FLOAT_DTYPES)}; "
                                 "pick the buffer with --variable NAME")
        slots = [n for n in source.names if n.startswith(name + "/") and source.shapes[n] == shape]
        stacks.append(Stack(name, int(shape[0]), dtype, slots))
    labels = unique_components(s.prefix.replace("/", "__") or "rnn" for s in stacks)
    for stack in stacks:
        stack.label = labels[stack.prefix.replace("/", "__") or "rnn"]
    return stacks


def clues_for(source: "Source", stack: Stack) -> Clues:
    """What the rest of the source says about ``stack``'s spec (an exact spec where the source states one)."""
    clues = clues_from(stack.variable, {n: s for n, s in source.shapes.items() if n not in stack.slots})
    if stack.variable in source.specs:  # the source states the spec outright
        clues.exact, clues.exact_how = source.specs[stack.variable], source.describe(stack.variable)
        return clues
    stored = f"{stack.prefix}/{SPEC_VARIABLE}" if stack.prefix else SPEC_VARIABLE
    if stored in source.shapes:  # a cudnn_port.layers layer saved its spec beside its buffer
        clues.exact = spec_from_vector(source.get(stored), stack.dtype, stored)
        clues.exact_how = f"stored beside it in {stored} by a cudnn_port.layers layer"
        return clues
    for style in STYLES.values():
        clues.exact = clues.exact or style.detect(source.shapes, stack.prefix)
    return clues


def prepare_stacks(source: "Source", variable: Optional[str] = None, flags: Optional[Dict[str, Any]] = None,
                   allow_nonfinite: bool = False, prefer_buffer: bool = False,
                   say: Optional[Callable[[str], None]] = None) -> List[Stack]:
    """The stacks of ``source`` with specs chosen, buffers read and checked: everything that can be refused is
    refused here, before anything is written. ``prefer_buffer``: convert even where canonical tensors stored beside
    a buffer disagree with it (otherwise that is an error: a wrong spec or layout, or an edited file)."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    stacks = find_stacks(source, variable)
    for stack in stacks:
        clues = clues_for(source, stack)
        if clues.exact is not None:
            contradicted = [f"--{k.replace('_', '-')} {v} (it is {getattr(clues.exact, k)})" for k, v in flags.items()
                            if getattr(clues.exact, k) != v]
            if contradicted:
                raise CudnnPortError(f"{stack.variable}: the flags contradict the spec the source states "
                                     f"({clues.exact_how}): {', '.join(contradicted)}; leave the spec flags out")
        stack.spec, stack.how = choose(stack.variable, stack.size, stack.dtype, clues, **flags)
        if flags and clues.exact is None:  # a spec the flags chose: a neighbour that takes another width says so
            stack.warning = neighbour_contradiction(stack.variable, stack.spec, {
                n: s for n, s in source.shapes.items() if n not in stack.slots})
        stack.blob = read_finite(source, stack.variable, allow_nonfinite)
        stack.stored = _stored_agreement(source, stack)
        bad = {n: a for n, a in stack.stored.items() if not a["agrees"]}
        if bad and not prefer_buffer:
            name, worst = max(bad.items(), key=lambda item: item[1].get("max_abs_diff", np.inf))
            raise CudnnPortError(f"{stack.variable}: {len(bad)} canonical tensors stored beside it disagree with it "
                                 f"({name}: {worst.get('reason') or 'max abs diff %.3g' % worst['max_abs_diff']}), "
                                 "so the spec or the layout is wrong, or a file was edited; pass --prefer-buffer to "
                                 "convert from the buffer anyway")
    for stack in stacks:
        say_to(say)(f"{stack.variable}: {stack.spec.describe()} ({stack.how})")
    return stacks


def read_finite(source: "Source", name: str, allow_nonfinite: bool = False) -> np.ndarray:
    """The value of ``name``, refused if it holds NaN/Inf (unless allowed)."""
    value = source.get(name)
    if not allow_nonfinite and not np.isfinite(value).all():
        bad = int(np.size(value) - np.isfinite(value).sum())
        name = getattr(source, "nonfinite_tensor", lambda n: n)(name)  # the user's tensor, not a synthesised one
        raise CudnnPortError(f"{name} holds {bad} NaN/Inf values; the training run diverged, or pass "
                             "--allow-nonfinite to convert them as they are")
    return value


def _stored_agreement(source, stack):
    """Canonical TF1 tensors stored beside the buffer (a default TF1 Saver wrote them): how far each is from the
    same tensor converted from the buffer (none for a cell cuDNN does not compute, which no TF1 cuDNN cell holds)."""
    if not stack.spec.cudnn_computes:
        return {}
    target = tf1.variant(source.shapes, stack.prefix)
    found = {}
    for name, value in target.write(unpack(stack.spec, stack.blob), stack.prefix).items():
        if name in source.shapes and name not in stack.slots:
            found[name] = agreement(source.get(name), value)
    return found


def agreement(stored: np.ndarray, converted: np.ndarray) -> Dict[str, Any]:
    """How far a canonical tensor already in the source is from the one converted from the buffer."""
    stored, converted = np.asarray(stored, dtype=np.float64), np.asarray(converted, dtype=np.float64)
    if stored.shape != converted.shape:
        return {"agrees": False, "reason": f"shape {list(stored.shape)} vs {list(converted.shape)}"}
    diff = float(np.max(np.abs(stored - converted), initial=0.0))
    return {"agrees": diff <= 1e-6 * max(1.0, float(np.max(np.abs(converted), initial=0.0))), "max_abs_diff": diff}


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
            for why in [registry.refusal(name, stack.spec)] if why]


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
    manifest.update(slot_policy=SLOT_POLICY, name_map={}, copied=[], dropped=[], replaced={})
    if "saved_model" in formats:
        manifest["saved_model_xla"] = xla
    for stack in stacks:
        manifest.stacks.append(_write_stack_artifacts(source, stack, tmp, style, formats, layer_dir,
                                                      {"xla": xla, "batch": batch}, several=len(stacks) > 1,
                                                      manifest=manifest, say=say))
        if drop_slots:
            manifest["dropped"] += stack.slots
    if "keras" in formats and source.model_config:
        write_whole_model(tmp, lambda path: save_keras3_model(source, path), manifest, say)
    items = _checkpoint_items(source, stacks, manifest, style, owned, drop_slots, allow_nonfinite)
    total = sum(int(np.prod(shape)) for name, shape in source.shapes.items() if name not in manifest["dropped"]) * 4

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
    entry = StackRecord(variable=stack.variable, prefix=stack.prefix, label=stack.label, spec=stack.spec.to_dict(),
                        param_count=stack.size, spec_source=stack.how)
    if stack.warning:
        manifest.warnings.append(stack.warning)
    scheme = getattr(target_for(style, source.shapes, stack.prefix), "scheme", None)
    if scheme:
        entry["scheme"] = scheme
    if stack.stored:
        worst = max((a.get("max_abs_diff", np.inf) for a in stack.stored.values()), default=0.0)
        entry["stored_canonical"] = {"count": len(stack.stored), "max_abs_diff": worst,
                                     "agree": all(a["agrees"] for a in stack.stored.values())}
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
        entry.record(details or {})
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
            names = manifest["name_map"][name_in] = []
            for layer, direction, params in canon.pseudo_layers():
                for name, value in target.write_layer(stack.spec, stack.prefix, layer, direction, params,
                                                      slot=bool(suffix)).items():
                    name = f"{name}/{suffix}" if suffix else name
                    if name in stack.stored:
                        manifest["replaced"][name] = stack.stored[name]
                    names.append(name)
                    converted.add(name)
                    yield name, contiguous(value), source.dtypes[name_in]
            if suffix:
                gap = max(float(np.max(np.abs(p.b_W - p.b_R), initial=0.0)) for p in canon.layers)
                entry.slots[name_in] = {"targets": names, "max_abs_b_W_minus_b_R": gap}
            else:
                entry.targets = names
        stack.blob = None  # let the buffer go once its tensors are written
    for name in source.names:
        if name not in owned and name not in converted:
            manifest["copied"].append(name)
            manifest["name_map"][name] = [name]
            yield name, source.get(name), source.dtypes[name]
