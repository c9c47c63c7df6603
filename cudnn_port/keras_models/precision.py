"""Mixed-precision Keras models (``mixed_float16``, ``mixed_bfloat16``) as float32 CPU models.

Under a mixed policy Keras keeps float32 variables and computes in float16 (or bfloat16): what Keras recommends for
training on GPUs. The CPU artifacts compute in float32 from those float32 variables, so their judge is the same
model rebuilt with the ``float32`` policy (:func:`float32_twin`: every layer's policy replaced, the variables
copied), and the distance between that judge and the original's own half-precision outputs is reported beside the
verdict (a number, not a failure: it is the half-precision rounding the original computes with).
"""
import contextlib
from typing import TYPE_CHECKING, Any, Iterator, Optional, Tuple
from ..errors import UnsupportedError

if TYPE_CHECKING:
    import keras


def mixed_policy(model: "keras.Model") -> Optional[str]:
    """The name of the first policy of ``model`` (or of a layer inside it) that does not compute in float32, or None."""
    for layer in _layers(model):
        policy = getattr(layer, "dtype_policy", None)
        if policy is not None and policy.compute_dtype not in ("float32", None) and \
                policy.variable_dtype == "float32":
            return policy.name
    return None


def _layers(layer):
    yield layer
    for inner in getattr(layer, "layers", None) or []:
        yield from _layers(inner)


@contextlib.contextmanager
def float32_policy() -> Iterator[None]:
    """Keras' global dtype policy set to ``float32`` inside the block (layers made there compute in float32 whatever
    the caller's training script set), and given back as it was after it."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    before = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(before)


def _float32_config(config: Any) -> Any:
    """``config`` with every mixed dtype policy in it replaced by ``"float32"``, and a half-precision input too (a
    ``Sequential`` that ``fit`` built under the mixed policy records its input in the compute dtype)."""
    if isinstance(config, list):
        return [_float32_config(c) for c in config]
    if not isinstance(config, dict):
        return config
    if config.get("class_name") == "InputLayer" and config.get("config", {}).get("dtype") in ("float16", "bfloat16"):
        config = dict(config, config=dict(config["config"], dtype="float32"))
    if config.get("class_name") in ("DTypePolicy", "FloatDTypePolicy") and \
            str(config.get("config", {}).get("name", "")).startswith("mixed_"):
        return "float32"
    return {k: ("float32" if k == "dtype" and isinstance(v, str) and v.startswith("mixed_") else _float32_config(v))
            for k, v in config.items()}


def float32_twin(model: "keras.Model") -> Tuple["keras.Model", Optional[str]]:
    """(``model`` computing in float32, the mixed policy it had or None). A float32 model is returned as it is; a
    mixed Functional or Sequential model is rebuilt from its config with float32 policies and given its variables."""
    policy = mixed_policy(model)
    if policy is None:
        return model, None
    if type(model).__name__ not in ("Functional", "Sequential"):
        raise UnsupportedError(f"model {model.name} computes in {policy} and is a subclassed "
                               f"{type(model).__name__}, which cannot be rebuilt in float32; build it as a "
                               "Functional or Sequential model, or set the float32 policy before building it")
    with float32_policy():
        twin = type(model).from_config(_float32_config(model.get_config()))
    twin.set_weights(model.get_weights())
    return twin, policy
