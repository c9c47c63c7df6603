"""Which specs fit a buffer of a given size, and which of them the rest of a checkpoint points at.

A buffer's size fixes I once mode, L, D and H (and a projection P, which is never guessed) are chosen
(layout.py's formula is linear in I; S = P or H)::

    size = D * (G*H*(I + S + 2) + P*H)  +  (L-1) * D * (G*H*(D*S + S + 2) + P*H)

so the candidates are enumerated over (mode, L, D, H) and each yields at most one I. Clues from the checkpoint
rank them: a mode named in the variable's scope (``cudnn_lstm``), a 2-D neighbour whose last dimension equals I
(an embedding feeding the stack), and one whose first dimension equals D*H (a dense layer reading it).
"""
from dataclasses import dataclass, field, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .errors import CudnnPortError
from .layout import MODES, RNNSpec

MAX_LAYERS = 8
MAX_UNITS = 8192

@dataclass
class Clues:
    """Hints from the checkpoint around one buffer."""

    mode: Optional[str] = None  # from the variable's name
    input_dims: set = field(default_factory=set)  # last dims of 2-D neighbours
    output_dims: set = field(default_factory=set)  # first dims of 2-D neighbours
    CANONICAL = "read off the canonical tensors stored beside it"
    # a spec the source states: canonical tensors beside the buffer, a spec variable, ...
    exact: Optional[RNNSpec] = None
    exact_how: str = CANONICAL

    @property
    def max_score(self) -> int:
        return 2 * bool(self.mode) + bool(self.input_dims) + bool(self.output_dims)

    def score(self, spec: RNNSpec) -> int:
        s = 2 * (spec.mode == self.mode)
        s += spec.input_size in self.input_dims
        s += spec.num_dirs * spec.num_units in self.output_dims
        return s

    def reasons(self, spec: RNNSpec) -> List[str]:
        out = []
        if spec.mode == self.mode:
            out.append(f"the name says {spec.mode}")
        if spec.input_size in self.input_dims:
            out.append(f"a neighbour ends in {spec.input_size} (input size)")
        if spec.num_dirs * spec.num_units in self.output_dims:
            out.append(f"a neighbour starts with {spec.num_dirs * spec.num_units} (output width)")
        return out


def clues_from(name: str, shapes: Dict[str, Sequence[int]]) -> Clues:
    """Clues for the buffer ``name`` from ``shapes`` (variable name -> shape) of the same checkpoint."""
    lowered = name.lower()
    mode = "lstm" if "lstm" in lowered else "gru" if "gru" in lowered else None
    clues = Clues(mode=mode)
    for other, shape in shapes.items():
        if other == name or other.startswith(name + "/") or len(shape) != 2:
            continue
        clues.input_dims.add(int(shape[-1]))
        clues.output_dims.add(int(shape[0]))
    return clues


INFERRED_MODES = ("gru", "lstm")  # a buffer's size alone never suggests cuDNN's plain RNNs: --mode rnn_tanh names one


def candidates(size: int, *, mode: Optional[str] = None, num_layers: Optional[int] = None,
               num_units: Optional[int] = None, input_size: Optional[int] = None, bidirectional: Optional[bool] = None,
               num_proj: Optional[int] = None, dtype: str = "float32") -> List[RNNSpec]:
    """Every RNNSpec whose buffer has exactly ``size`` elements and that agrees with the given fields. A projection
    is never guessed: only ``num_proj`` given (LSTM) adds one."""
    found = []
    P = int(num_proj or 0)
    modes = [mode] if mode else (["lstm"] if P else list(INFERRED_MODES))
    layer_range = [num_layers] if num_layers else range(1, MAX_LAYERS + 1)
    dir_range = [2 if bidirectional else 1] if bidirectional is not None else (1, 2)
    H = np.array([num_units]) if num_units else np.arange(P + 1, MAX_UNITS + 1)
    H = H.astype(np.int64)
    S = np.full_like(H, P) if P else H
    for m in modes:
        G = MODES[m]
        for L in layer_range:
            for D in dir_range:
                deeper = (L - 1) * D * (G * H * (D * S + S + 2) + P * H)
                rest = size - deeper - D * (G * H * (S + 2) + P * H)
                per_input = D * G * H
                ok = (rest > 0) & (rest % per_input == 0) & (H > P)
                for h, i in zip(H[ok], rest[ok] // per_input[ok]):
                    if input_size and i != input_size:
                        continue
                    found.append(RNNSpec(m, int(L), int(h), int(i), D == 2, dtype, num_proj=P))
    return found


def choose(name: str, size: int, dtype: str, clues: Clues, **flags) -> Tuple[RNNSpec, str]:
    """The one spec for buffer ``name``: fixed by flags, by canonical tensors beside it, or by unanimous clues.

    Returns ``(spec, how)``; raises CudnnPortError listing the candidates and the flags that settle it.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    if clues.exact is not None:
        exact = replace(clues.exact, dtype=dtype)
        if exact.param_count == size and all(getattr(exact, k) == v for k, v in given.items()):
            return exact, clues.exact_how
    found = candidates(size, dtype=dtype, **flags)
    if not found:
        wanted = " ".join(f"{k}={v}" for k, v in given.items())
        hint = ""
        if given and len(given) >= 4:
            try:
                full = RNNSpec(**{**{"mode": "lstm", "num_layers": 1, "num_units": 1, "input_size": 1,
                                     "bidirectional": False}, **given}, dtype=dtype)
                hint = f" (those flags expect {full.param_count} elements)"
            except CudnnPortError:
                pass
        loose = candidates(size, dtype=dtype)
        listing = "; ".join(s.flags() for s in ranked(loose, clues)[:4]) or "none up to 8 layers and 8192 units"
        raise CudnnPortError(
            f"{name} has {size} elements, which no {wanted or 'cuDNN'} spec fits{hint}; "
            f"specs that fit: {listing}")
    if len(found) == 1:
        return found[0], "the only spec of that size" if not given else "fixed by the flags given"
    order = ranked(found, clues)
    best = clues.score(order[0])
    top = [s for s in order if clues.score(s) == best]
    if len(top) == 1 and best == clues.max_score and best >= 3:
        return top[0], "chosen by clues: " + ", ".join(clues.reasons(top[0]))
    raise CudnnPortError(ambiguity_message(name, size, order))


def ranked(specs: List[RNNSpec], clues: Clues) -> List[RNNSpec]:
    """``specs`` best first: most clues, then fewest layers, widest, LSTM before GRU, one direction first."""
    return sorted(specs, key=lambda s: (-clues.score(s), s.num_layers, -s.num_units, s.mode, s.bidirectional))


def differing_flags(specs: List[RNNSpec]) -> List[str]:
    """The CLI flags whose values differ among ``specs``: passing them narrows the choice."""
    names = {"mode": "--mode", "num_layers": "--num-layers", "num_units": "--num-units",
             "input_size": "--input-size", "bidirectional": "--bidirectional", "num_proj": "--num-proj"}
    return [flag for key, flag in names.items() if len({getattr(s, key) for s in specs}) > 1]


def ambiguity_message(name: str, size: int, order: List[RNNSpec]) -> str:
    shown = "; ".join(s.describe() for s in order[:5])
    more = f" and {len(order) - 5} more" if len(order) > 5 else ""
    return (f"{name} ({size} elements) fits {len(order)} specs: {shown}{more}; "
            f"pass {', '.join(differing_flags(order))} to choose")


def neighbour_contradiction(name: str, spec: RNNSpec, shapes: Dict[str, Sequence[int]]) -> str:
    """Why a neighbour of buffer ``name`` contradicts ``spec`` (one line), or "": a 2-D tensor of the same
    checkpoint, outside the buffer's scope, whose first dimension is the output width (directions x units) of
    another spec of the same mode and size, and not ``spec``'s. (A layer after the stack takes its outputs: a
    ``dense/kernel [8, 11]`` after a width-16 stack is not what the stack feeds.) Only where the flags chose among
    several specs can it say something: a size that only one spec fits has no other."""
    width = spec.num_dirs * spec.num_units
    firsts = {int(s[0]): n for n, s in sorted(shapes.items())
              if len(s) == 2 and n != name and not n.startswith(name.rsplit("/", 1)[0] + "/")}
    if not firsts or width in firsts:
        return ""
    others = [s for s in candidates(spec.param_count, mode=spec.mode, num_proj=spec.num_proj or None,
                                    dtype=spec.dtype) if s.num_dirs * s.num_units in firsts]
    if not others:
        return ""
    other = ranked(others, Clues(mode=spec.mode))[0]
    seen = other.num_dirs * other.num_units
    return (f"{name}: {firsts[seen]} {list(shapes[firsts[seen]])} takes {seen} features, the output width of "
            f"{other.flags()}, not the {width} of the spec the flags give; check the flags")

