"""A source's cuDNN stacks found, their specs chosen, their buffers read and checked: everything the stack road
can refuse, before anything is written (:mod:`.stack` writes them).

    stacks = prepare_stacks(source, flags={...})

A buffer is a variable whose name ends in ``opaque_kernel`` (or the one named by ``variable=``). Variables
``{buffer}/…`` of the buffer's shape are its optimizer slots (``/Adam``, ``/Adam_1``, ``/Momentum``, object-based
``/.OPTIMIZER_SLOT/…``) and are converted with the same mapping.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, cast

import numpy as np

from ..errors import CudnnPortError
from ..source import BUFFER, Source
from ..infer import Clues, choose, clues_from, neighbour_contradiction
from ..layout import FLOAT_DTYPES, RNNSpec, unpack
from ..paths import unique_components
from ..progress import say_to
from ..stored_spec import SPEC_VARIABLE, spec_from_vector
from ..targets import STYLES, tf1

SPEC_FLAGS = ("mode", "num_layers", "num_units", "input_size", "bidirectional", "num_proj")


def given_flags(flags: Dict[str, Any]) -> List[str]:
    """The spec flags set in ``flags``, as the command line spells them (``--num-layers``)."""
    return [f"--{k.replace('_', '-')}" for k in SPEC_FLAGS if flags.get(k) is not None]


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

    @property
    def chosen_spec(self) -> RNNSpec:
        """``spec``, once :func:`prepare_stacks` has chosen it."""
        if self.spec is None:
            raise ValueError(f"{self.variable}: no spec chosen yet (prepare_stacks chooses it)")
        return self.spec


def find_stacks(source: Source, variable: Optional[str] = None) -> List[Stack]:
    """The Stacks of ``source``: every buffer, or just ``variable``. Specs are not chosen yet."""
    if variable is not None:
        if variable not in source.shapes:
            near = [n for n in source.names if n.endswith(BUFFER)] or source.names[:5]
            raise CudnnPortError(f"unknown variable {variable}; the source has e.g. {', '.join(near[:5])} "
                                 "(cudnn-port inspect lists them all)")
        names = [variable]
    else:
        buffers = [n for n in source.names if n.endswith(BUFFER)]
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


def clues_for(source: Source, stack: Stack) -> Clues:
    """What the rest of the source says about ``stack``'s spec (an exact spec where the source states one)."""
    clues = clues_from(stack.variable, {n: s for n, s in source.shapes.items() if n not in stack.slots})
    if stack.variable in source.specs:  # the source states the spec outright
        # a reader's stated spec is an RNNSpec (Source, below layout, types it as object)
        clues.exact, clues.exact_how = cast(RNNSpec, source.specs[stack.variable]), source.describe(stack.variable)
        return clues
    stored = f"{stack.prefix}/{SPEC_VARIABLE}" if stack.prefix else SPEC_VARIABLE
    if stored in source.shapes:  # a cudnn_port.layers layer saved its spec beside its buffer
        clues.exact = spec_from_vector(source.get(stored), stack.dtype, stored)
        clues.exact_how = f"stored beside it in {stored} by a cudnn_port.layers layer"
        return clues
    for style in STYLES.values():
        clues.exact = clues.exact or style.detect(source.shapes, stack.prefix)
    return clues


def prepare_stacks(source: Source, variable: Optional[str] = None, flags: Optional[Dict[str, Any]] = None,
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
        say_to(say)(f"{stack.variable}: {stack.chosen_spec.describe()} ({stack.how})")
    return stacks


def read_finite(source: Source, name: str, allow_nonfinite: bool = False) -> np.ndarray:
    """The value of ``name``, refused if it holds NaN/Inf (unless allowed)."""
    value = source.get(name)
    if not allow_nonfinite and not _all_finite(value):
        bad = int(np.size(value) - np.isfinite(value).sum())
        name = getattr(source, "nonfinite_tensor", lambda n: n)(name)  # the user's tensor, not a synthesised one
        raise CudnnPortError(f"{name} holds {bad} NaN/Inf values; the training run diverged, or pass "
                             "--allow-nonfinite to convert them as they are")
    return value


def _all_finite(value: np.ndarray, chunk: int = 1 << 22) -> bool:
    """Whether every element is finite, checked a chunk at a time: one mask of a 100M-parameter buffer is 95 MiB."""
    flat = np.ravel(value)
    return all(bool(np.isfinite(flat[i:i + chunk]).all()) for i in range(0, flat.size, chunk))


def _stored_agreement(source, stack):
    """Canonical TF1 tensors stored beside the buffer (a default TF1 Saver wrote them): how far each is from the
    same tensor converted from the buffer (none for a cell cuDNN does not compute, which no TF1 cuDNN cell holds)."""
    others = {n for n in source.shapes if n != stack.variable and n not in stack.slots}
    if not stack.spec.cudnn_computes or not others:
        return {}
    target = tf1.variant(source.shapes, stack.prefix)
    found = {}
    # a pseudo-layer at a time: converting the whole buffer at once held a second copy of it (a 100M-parameter
    # buffer's conversion peaked 1.1x the buffer's bytes higher, bench/bench_convert.py)
    for layer, direction, params in unpack(stack.spec, stack.blob).pseudo_layers():
        for name, value in target.write_layer(stack.spec, stack.prefix, layer, direction, params, False).items():
            if name in others:
                found[name] = agreement(source.get(name), value)
    return found


def agreement(stored: np.ndarray, converted: np.ndarray) -> Dict[str, Any]:
    """How far a canonical tensor already in the source is from the one converted from the buffer."""
    stored, converted = np.asarray(stored, dtype=np.float64), np.asarray(converted, dtype=np.float64)
    if stored.shape != converted.shape:
        return {"agrees": False, "reason": f"shape {list(stored.shape)} vs {list(converted.shape)}"}
    diff = float(np.max(np.abs(stored - converted), initial=0.0))
    return {"agrees": diff <= 1e-6 * max(1.0, float(np.max(np.abs(converted), initial=0.0))), "max_abs_diff": diff}
