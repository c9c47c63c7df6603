"""The inputs verify and bench feed a loaded signature (:func:`signature_feeds`): seeded values of the declared
dtypes, ids in each table's range, valid ragged splits, English sentences for strings, and the padding each mask
of the graph defines; and the steps of the outputs that padding leaves defined (:func:`valid_steps`). A module apart
from verify's rows (:mod:`.model_rows`) because bench and the graph road's ONNX run feed signatures the same way."""
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from .graph_inputs import masking_values, text_inputs, token_vocabularies
from .parity import EMPTY_ROW, PAD_FROM, sample_inputs

if TYPE_CHECKING:
    import tensorflow as tf


def signature_feeds(function: "tf.types.experimental.ConcreteFunction", seed: int,
                    empty_row: bool = False) -> Tuple[Dict[str, np.ndarray], str]:
    """Seeded inputs for a loaded signature, its fixed dimensions kept: N(0, 1) floats, small integers, and integer
    ids in [1, vocab) of the declared dtype for inputs that index a table (an Embedding), whatever that dtype
    (:func:`~.graph_inputs.token_vocabularies`); then the padding each mask of the graph defines
    (:func:`_right_padded`): the last row of each sequence input holds :data:`PAD_FROM` steps, then padding, and
    (``empty_row``, as verify's judged rows ask) row :data:`EMPTY_ROW` is padding at every step. Padding is id 0
    (a mask_zero Embedding's) and, for float sequences, the scalar the graph compares them with (a Masking layer's
    ``mask_value``, read from the graph: :func:`~.graph_inputs.masking_values`), else zero vectors. Padding only at
    a row's end: a padding step inside a row is a mask that Keras' cuDNN graphs refuse. Returns (feeds, a note
    naming the token inputs and the padded ones)."""
    specs = sorted(function.structured_input_signature[1].items())
    feeds = sample_inputs(specs, seed)
    texts = text_inputs(specs, feeds, seed)  # strings: English sentences
    feeds.update(texts)
    try:
        vocabs = token_vocabularies(function)
    except Exception:  # noqa: BLE001 (an unusual graph: plain inputs, as before)
        vocabs = {}
    try:
        values = masking_values(function)
    except Exception:  # noqa: BLE001 (an unusual graph: zero vectors, as before)
        values = {}
    rng = np.random.default_rng(seed + 1)
    for name, vocab in sorted(vocabs.items()):
        feeds[name] = rng.integers(1, max(vocab or 2, 2), size=feeds[name].shape).astype(feeds[name].dtype)
    ragged = _ragged_inputs(feeds, dict(specs), rng)
    padded, emptied = _right_padded(feeds, set(vocabs), set(texts) | set(ragged) | {f"{n}_1" for n in ragged}, values,
                                    empty_row)
    shown = ", ".join(f"{n} in [1, {max(v or 2, 2)})" for n, v in sorted(vocabs.items()))
    pads = ", ".join(f"{n} (Masking value {values[n]:g})" if n in values else n for n in padded)
    return feeds, (f"; token ids {shown}" if shown else "") + (f"; ragged {', '.join(ragged)}" if ragged else "") + \
        (f"; English sentences for {', '.join(sorted(texts))}" if texts else "") + \
        (f"; the last row of {pads} right-padded from step {PAD_FROM}" + (f", row {EMPTY_ROW} all padding"
                                                                          if emptied else "") +
         " (padding id 0; float steps the graph's Masking value, else zero vectors)" if padded else "")


def _right_padded(feeds, token_inputs, skip, values=None, empty_row=False) -> Tuple[List[str], bool]:
    """Right-pads, in place, the last row of each sequence input: token ids ([batch, time], an input that indexes a
    table) become 0 from step ``PAD_FROM`` on, a mask_zero Embedding's padding; float sequences ([batch, time,
    features]) become ``values[name]`` (the value a Masking layer of the graph compares them with) or zero vectors,
    a Masking layer's default padding; with ``empty_row``, in a batch of three or more, row ``EMPTY_ROW`` becomes
    padding at every step. A masked model then runs a row shorter than the batch, and one with no step, as it does
    in use; a model without masks reads the padding as data. Returns (the names padded, whether a row was emptied)."""
    padded, emptied, values = [], False, values or {}
    for name in sorted(feeds):
        value = feeds[name]
        if name in skip or value.ndim < 2 or value.shape[0] < 2 or value.shape[1] <= PAD_FROM:
            continue
        if (name in token_inputs and value.ndim == 2) or (value.dtype.kind == "f" and value.ndim == 3):
            pad = values.get(name, 0)
            value[-1, PAD_FROM:] = pad
            if empty_row and value.shape[0] > EMPTY_ROW + 1:
                value[EMPTY_ROW] = pad
                emptied = True
            padded.append(name)
    return padded, emptied


def _ragged_inputs(feeds, specs, rng, rows=3, steps=7) -> List[str]:
    """A ragged input (``tf.RaggedTensorSpec``, e.g. tf_keras ``Input(ragged=True)``) reaches a signature as NAME,
    its flat values, and NAME_1, its row splits (int, rank 1); random integers are no valid splits. Gives such
    pairs ``rows`` rows of 1 to ``steps`` values (splits from 0 to the values' length), in place; returns the
    names."""
    found = []
    for name in sorted(feeds):
        base = name[:-2]
        if not (name.endswith("_1") and base in feeds and feeds[name].ndim == 1 and feeds[name].dtype.kind == "i"
                and specs[name].shape[0] is None and specs[base].shape.rank and specs[base].shape[0] is None):
            continue
        lengths = rng.integers(1, steps + 1, size=rows)
        values = feeds[base]
        feeds[base] = (rng.normal(size=(int(lengths.sum()),) + values.shape[1:]).astype(values.dtype)
                       if values.dtype.kind == "f" else np.resize(values, (int(lengths.sum()),) + values.shape[1:]))
        feeds[name] = np.concatenate([[0], np.cumsum(lengths)]).astype(feeds[name].dtype)
        found.append(base)
    return found


def valid_steps(feeds: Dict[str, np.ndarray]) -> Optional[Callable[[Dict[str, Any]], Dict[str, Any]]]:
    """Where the original runs the CPU twins of its cuDNN functions (a tf.keras graph), a per-step output past a
    padded row's end is defined twice: the CPU twin repeats the last valid step, cuDNN (and a fused ONNX node)
    writes zeros. ``valid(outputs)``: ``outputs`` with the padded row's steps from ``PAD_FROM`` on (and every step of
    a row of nothing but padding) set to zero in each output ``[batch, time, ...]`` of the padded inputs' batch and
    time, so that both are compared on the valid steps only (final states and a last step are compared whole); None
    where no input was padded."""
    shapes, empty = set(), False
    for v in feeds.values():  # the inputs _right_padded padded: one value (id 0, a Masking value) from PAD_FROM on
        if v.ndim < 2 or v.shape[0] < 2 or v.shape[1] <= PAD_FROM or v.dtype.kind not in "iuf":
            continue
        pad = v[-1, -1].flat[0]
        if np.all(v[-1, PAD_FROM:] == pad) and (v.dtype.kind == "f" or pad == 0):
            shapes.add(v.shape[:2])
            empty |= v.shape[0] > EMPTY_ROW + 1 and bool(np.all(v[EMPTY_ROW] == pad))
    if not shapes:
        return None

    def valid(outputs):
        cut = {}
        for name, value in outputs.items():
            value = np.asarray(value)
            if value.ndim >= 3 and value.shape[:2] in shapes:
                value = value.copy()
                value[-1, PAD_FROM:] = 0
                if empty:
                    value[EMPTY_ROW] = 0
            cut[name] = value
        return cut

    return valid
