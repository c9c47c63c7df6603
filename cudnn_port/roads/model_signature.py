"""A whole model's signature, as every whole-model artifact takes and returns it: the input specs (a model built
from a batch probed on other sizes, keeping a size only where it runs on no other; :func:`signature_specs`), where
each output of a dict of outputs sits (:func:`output_keys`), and the model traced over those specs with its fused
layers on one path (:func:`traced`). :mod:`cudnn_port.roads.model` writes the artifacts from them."""
from typing import Any, List, Optional, Sequence, Tuple

from ..deps import import_tf
from ..judging.parity import sample_inputs
from ..layer_paths import forced_path
from ..keras_models.model_inputs import as_model_takes, built_from_a_batch, embedding_vocabularies, input_specs


def signature_specs(model: Any, ids_dtype: Optional[str]) -> Tuple[List[Any], List[str]]:
    """The whole model's input specs (:func:`cudnn_port.keras_models.model_inputs.input_specs`) and the warnings
    they raise. A Sequential model whose input records a batch size or a length (built from a batch, or given them by
    its keras.Input: the two look alike) is run once on other sizes (3 rows, 7 steps): one that runs takes any batch and
    length; one that cannot run on another length (a ``Flatten`` after its recurrent layer, say) keeps its length,
    and one that cannot run on another batch size keeps that too, each with a warning."""
    warnings: List[str] = []
    specs = input_specs(model, warnings.append, ids_dtype)
    if not built_from_a_batch(model):
        return specs, warnings
    tf = import_tf()
    recorded = [list(t.shape) for t in model.inputs]
    batch_only = [tf.TensorSpec([None] + r[1:], s.dtype, name=s.name) for r, s in zip(recorded, specs)]
    fixed = [tf.TensorSpec(r, s.dtype, name=s.name) for r, s in zip(recorded, specs)]
    if _runs_on(model, specs):
        return specs, warnings
    where = (f"the model's input is recorded as shape {recorded[0]} (its keras.Input, or the first batch Keras built "
             "it on)")
    if _runs_on(model, batch_only):
        warnings.append(f"{where} and it does not run on other lengths, so every artifact keeps that length; give it "
                        "keras.Input(shape=(None, ...)) and layers that take any length for any size")
        return batch_only, warnings
    warnings.append(f"{where} and it runs on no other size, so every artifact takes exactly that shape")
    return fixed, warnings


def _runs_on(model: Any, specs: Sequence[Any]) -> bool:
    """Whether ``model`` runs on inputs of ``specs`` (None: 3 rows, 7 steps; ids 0, in every vocabulary)."""
    feeds = sample_inputs([(s.name, s) for s in specs], seed=0, batch=3, steps=7)
    ids = embedding_vocabularies(model, [s.name for s in specs])  # float ids too: 0, in every vocabulary
    values = [feeds[s.name] * 0 if s.dtype.is_integer or s.name in ids else feeds[s.name] for s in specs]
    try:
        model(as_model_takes(model, values), training=False)
        return True
    except Exception:  # noqa: BLE001 (any failure to run means: not on these sizes)
        return False


def output_keys(model: Any) -> List[str]:
    """Where each output sits in a model whose outputs hold a dict ({"cls": ..., "tag": ...}; [y, {"a": ...}] gives
    "0", "1/a"), in the order the artifacts return them (a dict's values in sorted key order, as Keras flattens it);
    [] for a tensor or a list of tensors."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    structure = getattr(model, "output", None) if type(model).__name__ in ("Functional", "Sequential") else None
    paths = [path for path, _ in keras.tree.flatten_with_path(structure)] if structure is not None else []
    return ["/".join(map(str, path)) for path in paths] if any(isinstance(p, str) for q in paths for p in q) else []


def traced(model: Any, specs: Sequence[Any], path: str) -> Any:
    """The model as a concrete function over ``specs``, its fused layers traced on ``path``."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    tf = import_tf()

    def call(*xs):
        result = model(as_model_takes(model, xs), training=False)
        return {f"output_{i}": r for i, r in enumerate(keras.tree.flatten(result))}  # a dict: in sorted key order

    with forced_path(path):
        return tf.function(call, input_signature=specs, autograph=False).get_concrete_function()

