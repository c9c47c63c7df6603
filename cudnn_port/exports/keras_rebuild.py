"""A Keras 2 full-model ``.h5`` file rebuilt whole in Keras 3: every CuDNNLSTM / CuDNNGRU layer becomes a standard
``LSTM`` / ``GRU(reset_after=True)`` holding the converted weights, every other layer keeps its config and weights.

Keras 3 builds the model from an edited copy of the file (``OUT/keras/model.keras``); the reader of the file is
:class:`cudnn_port.readers.keras_h5.KerasH5`.
"""
import json
import os
import shutil
import warnings
from typing import TYPE_CHECKING, Optional

from ..errors import reason
from ..readers.keras_h5 import CUDNN_CLASSES, h5_text
from ..targets.keras import VARS, layer_weights

if TYPE_CHECKING:
    from ..readers.keras_h5 import KerasH5


def _standard_config(layer):
    """Rewrite a Keras 2 layer config in place: CuDNNLSTM -> LSTM, CuDNNGRU -> GRU(reset_after=True); the layer a
    wrapper (``Bidirectional``, ``TimeDistributed``) holds gets ``"module": "keras.layers"`` where it has none."""
    if not isinstance(layer, dict):
        return
    cfg = layer.get("config")
    if layer.get("class_name") in CUDNN_CLASSES and isinstance(cfg, dict):
        mode = CUDNN_CLASSES[layer["class_name"]]
        layer["class_name"] = mode.upper()
        cfg.pop("time_major", None)
        cfg.update(activation="tanh", recurrent_activation="sigmoid", use_bias=True)
        if mode == "gru":
            cfg["reset_after"] = True
    if isinstance(cfg, dict):
        inner = cfg.get("layer")
        if isinstance(inner, dict) and "module" not in inner:  # tf.keras <= 2.12 wrote no module: Keras 3's
            inner["module"] = "keras.layers"                  # wrappers cannot find the inner class without it
        _standard_config(inner)
        for child in cfg.get("layers") or []:
            _standard_config(child)


def save_keras3_model(source: "KerasH5", path: str) -> Optional[str]:
    """Rebuild full-model file ``source`` (a :class:`~cudnn_port.readers.keras_h5.KerasH5` with a model config) in
    Keras 3 at ``path`` (``.keras``): each CuDNN layer becomes LSTM / GRU(reset_after=True) with converted weights,
    every other layer keeps its config and weights. Keras 3 builds the model from an edited copy of the file.
    Returns None, or why Keras 3 could not rebuild it (the caller reports that and goes on with the per-layer
    files)."""
    # lazy: h5py, Keras, loaded on first use (import cudnn_port stays light)
    import h5py
    import keras

    edited = f"{path}.keras2.h5"
    shutil.copyfile(source.prefix, edited)
    try:
        with h5py.File(edited, "r+") as f:
            config = json.loads(json.dumps(source.model_config))
            _standard_config(config)
            f.attrs["model_config"] = json.dumps(config)
            if "optimizer_weights" in f:
                del f["optimizer_weights"]
            root = f["model_weights"]
            for name, canon in source.canonical.items():
                group = root[name.rsplit("/", 1)[0]]
                new = [dict(zip(VARS, layer_weights(canon.spec, p))) for p in canon.layers]
                for wname in (h5_text(n) for n in group.attrs["weight_names"]):
                    owner, _, var = wname.rpartition("/")
                    direction = int(owner.rsplit("/", 1)[-1].startswith("backward_"))
                    del group[wname]
                    group.create_dataset(wname, data=new[direction][var.split(":")[0]])
        with warnings.catch_warnings():  # Keras 3 frowns on the Keras 2 config style; it still builds the same model
            warnings.simplefilter("ignore")
            model = keras.models.load_model(edited, compile=False)
        model.save(path)
    except Exception as e:  # a layer Keras 3 no longer knows, say: the per-layer files still stand
        return (f"keras/model.keras not written: Keras 3 cannot rebuild the whole model ({reason(e)}); only the "
                "per-layer artifacts were written")
    finally:
        if os.path.exists(edited):
            os.remove(edited)
    return None
