"""``keras``: OUT/keras/<stack>.keras, a Keras 3 model of stock ``LSTM`` / ``GRU(reset_after=True)`` /
``Bidirectional`` layers holding the converted weights (:mod:`cudnn_port.targets.keras`). Keras layers take no
sequence lengths, so the file is run with a right-padded mask and zero initial states and judged on its outputs."""
import os
from typing import Any, Callable, Optional

import numpy as np

from . import Artifact, Format, Runtime
from ..exports.artifact_check import check_artifact
from ..targets import keras as keras_target
from .jobs import Outputs


WHOLE_MODEL = "keras/model.keras"  # the whole model in Keras 3, on the whole-model road and for a Keras 2 .h5


def write_whole_model(tmp: str, save: Callable[[str], Optional[str]], manifest: Any,
                      say: Callable[[str], None]) -> None:
    """OUT/keras/model.keras, the one writer of it: ``save(path)`` writes the whole model there (the model as given on
    the whole-model road, the judge's copy; a Keras 2 ``.h5`` rebuilt in Keras 3 on the stack road) and returns None,
    or why it could not (a warning; the file is then not listed)."""
    say(f"writing {WHOLE_MODEL}")
    path = os.path.join(tmp, WHOLE_MODEL)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    problem = save(path)
    manifest.model_artifacts = dict(manifest.model_artifacts or {}, **({} if problem else {"keras": WHOLE_MODEL}))
    if problem:
        manifest.warnings.append(problem)


def _write(job, paths):
    keras_target.save_model(job.canon, paths["keras"], name=job.name)


def _open(path, job):
    """The file loaded by plain Keras, run layer by layer with a right-padded mask; returns outputs alone."""
    # lazy: Keras, loaded on first use (import cudnn_port stays light)
    import keras

    check_artifact(path)
    model = keras.saving.load_model(path, compile=False)

    def run(feeds):
        x, lengths = feeds["inputs"], feeds["sequence_lengths"]
        mask = np.arange(x.shape[1])[None, :] < np.asarray(lengths)[:, None]
        h = x
        for layer in model.layers[1:]:
            h = layer(h, mask=mask)
        return Outputs.of_stack([np.asarray(h) * mask[..., None]])

    return run


def _cannot_hold(spec):
    return "Keras' LSTM has no projection" if spec.num_proj else None


FORMAT = Format(name="keras", help="OUT/keras/<stack>.keras, stock Keras 3 layers",
                artifacts=(Artifact("keras", "keras/{label}.keras", states="none", label="keras (.keras file)"),),
                write=_write, runtimes=(Runtime("keras", _open, needs=("keras",), outputs_only=True, bench=False),),
                cannot_hold=_cannot_hold, needs=("keras",), order=10)
