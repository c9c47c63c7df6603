"""Parity checks shared by ``verify`` and ``export``: seeded inputs, one comparison rule, report rows.

An element passes when ``|artifact - judge| <= atol + rtol * |judge|``. The defaults (1e-5, 1e-4) hold for fp32
artifacts of the sizes verify draws (batch 4, 9 steps); cross-device checks (a GPU against the CPU reference) use
:func:`fp32_floor` instead, since the fp32 error of any implementation grows with the stack's size.
"""
import json
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Tuple

import numpy as np

from ..errors import reason
from ..keras_models.model_inputs import embedding_vocabularies, masking_values
from ..paths import write_new

if TYPE_CHECKING:
    from ..layout import RNNSpec
    import tensorflow as tf

ATOL, RTOL = 1e-5, 1e-4


def sample_batch(spec: "RNNSpec", batch: int = 4, steps: int = 9,
                 seed: int = 0) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Seeded inputs: x [B, T, I], lengths with 1 and T among them, initial_h [L*D, B, S], initial_c [L*D, B, H]."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, steps, spec.input_size)).astype(np.float32)
    lengths = np.concatenate([[steps, 1], rng.integers(1, steps + 1, size=max(0, batch - 2))])[:batch].astype(np.int32)
    x[np.arange(steps)[None, :] >= lengths[:, None]] = 0.0
    h = (rng.normal(size=(spec.num_pseudo_layers, batch, spec.state_size)) * 0.5).astype(np.float32)
    c = (rng.normal(size=(spec.num_pseudo_layers, batch, spec.num_units)) * 0.5).astype(np.float32)
    return x, lengths, h, c


def sample_inputs(named_specs: "Sequence[Tuple[str, tf.TensorSpec]]", seed: int = 0, batch: int = 3, steps: int = 7,
                  pad_last: bool = False, axes: Optional[Dict[str, Sequence[Optional[str]]]] = None
                  ) -> Dict[str, np.ndarray]:
    """Seeded feeds for (name, TensorSpec) pairs, drawn in the order given: floats N(0, 1), integers in [1, 4)
    (token ids, lengths); unknown dims ``batch`` first and ``steps`` after, or as ``axes`` ({name: each dimension's
    role, "batch" / "time" / None}) says where an input's batch is not first (a program's time-major input).
    ``pad_last``: the last row is zero from step 2 on (right padding, to exercise masks)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in named_specs:
        roles = (axes or {}).get(name) or ["batch"]
        shape = [d if d is not None else (batch if roles[i:i + 1] == ["batch"] else steps)
                 for i, d in enumerate(spec.shape.as_list())]
        if spec.dtype.is_floating:
            value = rng.normal(size=shape).astype(spec.dtype.as_numpy_dtype)
        else:
            value = rng.integers(1, 4, size=shape).astype(spec.dtype.as_numpy_dtype)
        if pad_last and len(shape) >= 2 and shape[0] > 1:
            value[-1, 2:] = 0
        feeds[name] = value
    return feeds


def compare(name: str, got: Sequence[Optional[np.ndarray]], want: Sequence[Optional[np.ndarray]], atol: float = ATOL,
            rtol: float = RTOL, note: str = "") -> Dict[str, Any]:
    """A report row: ``got`` against ``want`` (lists of arrays; a None in ``want`` is skipped)."""
    rows_abs, rows_rel, ok = [], [], True
    got, want = list(got), list(want)
    if len(got) < len([w for w in want if w is not None]):
        return failed_row(name, ValueError(f"{len(got)} outputs, the judge has {len(want)}"))
    for i, (g, w) in enumerate(zip(got, want)):
        if w is None:
            continue
        if g is None:
            return failed_row(name, ValueError(f"output {i} was not returned; the judge has {len(want)} outputs"))
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            return {"artifact": name, "max_abs": None, "max_rel": None, "passed": False,
                    "note": f"shape {list(g.shape)} vs reference {list(w.shape)}"}
        if not np.all(np.isfinite(w)):  # the judge overflowed: nothing to hold the artifact to
            return {"artifact": name, "max_abs": None, "max_rel": None, "passed": False,
                    "note": f"the judge's output {i} is not finite on this sample (the cell's functions overflow from "
                            "these inputs and states), so this artifact cannot be judged on it"}
        diff = np.abs(g - w)
        ok &= bool(np.all(diff <= atol + rtol * np.abs(w)))  # False on NaN
        rows_abs.append(float(diff.max(initial=0.0)))
        big = np.abs(w) > atol
        rows_rel.append(float((diff[big] / np.abs(w[big])).max(initial=0.0)))
    return {"artifact": name, "max_abs": max(rows_abs, default=0.0), "max_rel": max(rows_rel, default=0.0),
            "passed": ok, "note": note}


def skipped_row(name: str, why: str) -> Dict[str, Any]:
    """The report row of a check that could not be made here (a runtime not installed): neither passed nor failed."""
    return {"artifact": name, "max_abs": None, "max_rel": None, "passed": None, "note": f"skipped: {why}"}


def failed_row(name: str, error: BaseException) -> Dict[str, Any]:
    """The report row of an artifact that failed to load or run: a failed check, not a crash."""
    return {"artifact": name, "max_abs": None, "max_rel": None, "passed": False, "note": reason(error, 200)}


def fp32_floor(reference_error: float, factor: float = 4.0, minimum: float = 1e-5) -> float:
    """A cross-device tolerance from the fp32 floor of the case at hand: ``factor`` times what an independent fp32
    CPU implementation reaches against the float64 reference on the same inputs (never below ``minimum``). cuDNN's
    own fp32 error grows with the stack's size like any fp32 implementation's (measured on an H100: 1.6e-5 to
    2.9e-5 from float64 on 3-layer, hidden-128, 60-step stacks), so a fixed tolerance holds only for small ones."""
    return max(minimum, factor * float(reference_error))


def write_report(path: str, report: Dict[str, Any]) -> None:
    """Write ``report`` as JSON at ``path`` through a new temporary file, so a reader never sees half of it and
    no link planted there (``parity.json``, a ``.tmp`` beside it) is written through."""
    write_new(path, json.dumps(report, indent=2))


PAD_FROM = 2  # a right-padded row holds PAD_FROM steps, then padding
EMPTY_ROW = 1  # the row of every padding step, where the batch has one to spare (row 0 stays whole)


def model_feeds(model: Any, names: Sequence[str], specs: Sequence[Any], seed: int,
                empty_row: bool = True, axes: Optional[Dict[str, Sequence[Optional[str]]]] = None
                ) -> Dict[str, np.ndarray]:
    """Seeded inputs of ``specs`` (by ``names``) for a whole model (:func:`sample_inputs`), with ids in each
    Embedding's range for the inputs an Embedding reads, whatever their dtype; then the padding each mask of the
    model defines: the last row holds :data:`PAD_FROM` steps, then padding, and (``empty_row``, in a batch of 3 or
    more) row :data:`EMPTY_ROW` of each sequence input (ids ``[batch, time]``, features ``[batch, time, n]``) is
    padding at every step. Padding is id 0 (a ``mask_zero`` Embedding's) and, for an input a ``Masking`` layer reads,
    that layer's own ``mask_value`` from the model's config
    (:func:`~cudnn_port.keras_models.model_inputs.masking_values`); 0 elsewhere. ``axes``: as :func:`sample_inputs`
    takes them; an input whose batch is not first is not padded (a program's: no mask reads it)."""
    feeds = sample_inputs(list(zip(names, specs)), seed, axes=axes)
    rng = np.random.default_rng(seed + 1)
    vocabs = embedding_vocabularies(model, names)
    for name, (low, vocab) in sorted(vocabs.items()):
        feeds[name] = rng.integers(low, max(vocab, low + 1), size=feeds[name].shape).astype(feeds[name].dtype)
    values = masking_values(model, names)
    for name in names:
        value, pad = feeds[name], values.get(name, 0)
        if value.ndim < 2 or value.shape[0] < 2 or ((axes or {}).get(name) or ["batch"])[0] != "batch":
            continue
        value[-1, PAD_FROM:] = pad
        sequence = (name in vocabs and value.ndim == 2) or (value.dtype.kind == "f" and value.ndim == 3)
        if empty_row and sequence and value.shape[0] > EMPTY_ROW + 1:
            value[EMPTY_ROW] = pad
    return feeds

