"""What a whole Keras model's artifacts take as inputs: names, dtypes and shapes as the model means them.

Keras fixes an input's shape from the first batch it sees when the model has no ``keras.Input``: a ``Sequential``
built by ``fit`` (or ``predict``, or a call on a batch) records that batch's size (``None`` where the rows do not
divide into batches, or come from a ``tf.data`` pipeline) and length, and the dtype of its first layer (float32 ids
for an ``Embedding``). Those are facts of one training batch, not of the model. Keras keeps no record of where a
``Sequential``'s input came from (a recorded shape and a ``keras.Input``'s look alike), so every ``Sequential``
whose input records a batch size or a length is "built from a batch" (:func:`built_from_a_batch`): its specs get a
dynamic batch and time (the first two dimensions; the features, and an image's height and width, stay), and the
caller (:func:`cudnn_port.roads.model.export`) keeps a size only where the model does not run on others, with a
warning. An input an ``Embedding`` reads takes int32 ids where the model records float ids (Keras' default dtype), and
the ids its ``keras.Input`` states otherwise; ``ids_dtype`` (``--ids-dtype``, one of :data:`IDS_DTYPES`) makes every
artifact take ids of that dtype instead: int64, as NumPy and most tokenizers give them, or float32, as Keras also
takes them (an artifact's input has one dtype). Every other model keeps what its inputs state; each dimension fixed
besides the features is said in one warning line naming the fix.

The specs are recorded in the manifest (``model_input_specs``), so that ``verify`` feeds the artifacts what they
take, whichever model judges them.
"""
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple
from ..deps import import_tf
from ..errors import CudnnPortError
from ..manifest_records import TensorSpecRecord

TF_INPUT_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*")  # an input name a SavedModel signature keeps
IDS_DTYPES = ("int32", "int64", "float32")  # what --ids-dtype takes: the dtypes an Embedding's ids come in
IDS_ONLY = ("--ids-dtype applies to a Keras 3 model (.keras, or model.save(\"m.h5\")), whose artifacts take the "
            "model's inputs; leave it out for this source")

if TYPE_CHECKING:
    import keras
    import tensorflow as tf


def embedding_vocabularies(model: "keras.Model", names: Sequence[str]) -> Dict[str, Tuple[int, int]]:
    """{input name: (lowest id, input_dim)} for each model input that an Embedding layer reads directly; the lowest
    id is 1 where the Embedding masks 0 (padding, which verify puts only at the end of a row)."""
    return {name: (1 if getattr(layer, "mask_zero", False) else 0, int(layer.input_dim))
            for name, layer in _inputs_read_by(model, names, "Embedding")}


def masking_values(model: "keras.Model", names: Sequence[str]) -> Dict[str, float]:
    """{input name: mask_value} for each model input that a Masking layer reads directly, the value read from the
    layer's own config (``Masking(mask_value=-1.0)``: -1.0; Keras' default 0.0): a step whose every feature equals
    it is padding."""
    return {name: float(layer.get_config()["mask_value"]) for name, layer in _inputs_read_by(model, names, "Masking")}


def _inputs_read_by(model, names, kind):
    """(input name, layer) for each model input a layer of Keras class ``kind`` (or a subclass: a .pt2's
    TorchEmbedding is an Embedding) reads directly."""
    by_id = {id(t): n for t, n in zip(model.inputs, names)}
    for layer in model.layers:
        if kind not in (c.__name__ for c in type(layer).__mro__):
            continue
        for node in getattr(layer, "_inbound_nodes", []):
            for tensor in getattr(node, "input_tensors", []):
                if id(tensor) in by_id:
                    yield by_id[id(tensor)], layer


def declared_batch(model: "keras.Model") -> Optional[int]:
    """The batch size every input of ``model`` records (``keras.Input(batch_shape=...)``, ``batch_size=``, or the
    batch a ``Sequential`` was built on), or None where one has none or they differ. A stateful layer keeps states
    of that batch; the artifacts' batch stays dynamic, and this is only where LiteRT starts (see
    :mod:`cudnn_port.exports.tflite_model`)."""
    try:
        inputs = list(getattr(model, "inputs", None) or [])
    except (AttributeError, ValueError):  # a model Keras never built has no inputs to ask
        return None
    sizes = {t.shape[0] if len(t.shape) else None for t in inputs}
    size = sizes.pop() if len(sizes) == 1 else None
    return int(size) if isinstance(size, int) and size > 0 else None


def built_from_a_batch(model: "keras.Model") -> bool:
    """Whether Keras may have fixed ``model``'s input from a batch it was first called on: a ``Sequential`` whose
    input records a batch size or a time length. Without ``keras.Input``, ``fit``, ``predict`` or a call builds it on
    the first batch's shape (``[None, T, ...]`` where the rows do not divide into batches, or come from a
    ``tf.data`` pipeline); once built, Keras records that exactly as it records a ``keras.Input``, so the two cannot
    be told apart, and the caller probes which sizes the model runs on."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    inputs = getattr(model, "inputs", None) or []
    return isinstance(model, keras.Sequential) and len(inputs) == 1 and \
        any(d is not None for d in list(inputs[0].shape)[:2])


def check_ids_dtype(ids_dtype: Optional[str]) -> None:
    """Refuse an ``ids_dtype`` that is none of :data:`IDS_DTYPES` (None: the default)."""
    if ids_dtype is not None and ids_dtype not in IDS_DTYPES:
        raise CudnnPortError(f"unknown ids dtype {str(ids_dtype)[:40]!r}; choose one of {', '.join(IDS_DTYPES)}")


def signature_names(names: Sequence[str]) -> List[str]:
    """``names`` as every artifact can take them: a name a SavedModel signature keeps (:data:`TF_INPUT_NAME`) as it
    is; any other with each character outside ``[A-Za-z0-9_.\\/>-]`` made ``_`` and what a signature name cannot
    start with stripped (``_x``: ``x``), ``input_N`` (N its position) where nothing is left, and ``_1``, ``_2`` ...
    added until it is no other input's name. A ``.pt2`` program's inputs are its forward's arguments, which
    TensorFlow would rename or refuse."""
    taken = {n for n in names if TF_INPUT_NAME.fullmatch(n)}
    result = []
    for i, name in enumerate(names):
        if TF_INPUT_NAME.fullmatch(name):
            result.append(name)
            continue
        base = re.sub(r"^[^A-Za-z0-9.]+", "", re.sub(r"[^A-Za-z0-9_.\\/>-]", "_", name)) or f"input_{i}"
        given, k = base, 0
        while given in taken:
            k += 1
            given = f"{base}_{k}"
        taken.add(given)
        result.append(given)
    return result


def input_specs(model: "keras.Model", warn: Callable[[str], None],
                ids_dtype: Optional[str] = None) -> List["tf.TensorSpec"]:
    """The whole model's inputs as its artifacts take them (see the module docstring); the names are the model's.
    ``ids_dtype``: the dtype of every input an Embedding reads (None: int32 for float ids, else the model's)."""
    check_ids_dtype(ids_dtype)
    tf = import_tf()
    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise CudnnPortError(f"model {model.name} has no known inputs; build it (call it once, or use "
                             "keras.Input) before exporting")
    names = [t.name.split(":")[0] for t in inputs]
    ids = embedding_vocabularies(model, names)
    if ids_dtype is not None and not ids:
        warn(f"ids dtype {ids_dtype} given, but no input of the model feeds an Embedding, so it changes nothing")
    relax = built_from_a_batch(model)
    specs = []
    for name, tensor in zip(names, inputs):
        if not TF_INPUT_NAME.fullmatch(name):  # TensorFlow renames it, and tf.saved_model.save refuses the signature
            raise CudnnPortError(f"input {name!r}: a SavedModel signature takes no input name that starts with '_' "
                                 "or holds other characters than letters, digits and _ . / > -; rename the "
                                 "keras.Input (name=...) and export again")
        shape, dtype = list(tensor.shape), tf.as_dtype(tensor.dtype)
        if relax:  # batch and time, the sizes a batch fixes; features (and an image's height and width) stay
            free = 2 if name in ids or len(shape) > 2 else 1
            shape = [None] * free + shape[free:]
        if name in ids and (ids_dtype is not None or dtype.is_floating):
            dtype = tf.as_dtype(ids_dtype or "int32")
        fixed = [(i, d) for i, d in enumerate(shape[:len(shape) if name in ids else -1]) if d is not None]
        if fixed and not relax:
            dims = ", ".join(f"{'batch' if i == 0 else 'time' if i == 1 else f'dimension {i}'} {d}" for i, d in fixed)
            warn(f"input {name!r} is fixed at {dims} (its keras.Input, or the first batch Keras built the model on), "
                 "and so is every artifact; give the model keras.Input(shape=(None, ...)) with no batch_size for any "
                 "size")
        specs.append(tf.TensorSpec(shape, dtype, name=name))
    return specs


def as_model_takes(model: "keras.Model", values: Sequence[Any]) -> Any:
    """``values``, one per ``model.inputs`` (in that order), as a call of ``model`` takes them: the one value, or
    the structure its ``keras.Input`` tensors were given in (a dict by name, a list), which Keras flattens in
    ``model.inputs`` order."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    values = list(values)
    if len(values) == 1:
        return values[0]
    structure = getattr(model, "_inputs_struct", None)
    return keras.tree.pack_sequence_as(structure, values) if isinstance(structure, dict) else values


def to_records(specs: Sequence["tf.TensorSpec"]) -> List[Dict[str, Any]]:
    """The specs as the manifest records them: {name, dtype, shape (None: any size)}."""
    return [{"name": s.name, "dtype": s.dtype.name, "shape": s.shape.as_list()} for s in specs]


def from_records(records: Optional[Sequence[TensorSpecRecord]]) -> Optional[List["tf.TensorSpec"]]:
    """The manifest's records back as TensorSpecs (None when the manifest has none)."""
    if not records:
        return None

    tf = import_tf()
    return [tf.TensorSpec(r.shape, tf.as_dtype(r.dtype), name=r.name) for r in records]
