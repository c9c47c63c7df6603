"""Training-step benchmark: the fused layer vs Keras 3 stacks of the same size, in one process.

Model: a 3-layer bidirectional LSTM (or GRU, ``--mode gru``: Keras' ``GRU(reset_after=True)``, cuDNN's form)
(input 128, hidden 256) over 50 steps, batch 32, then Dense(1); one step is forward + backward + SGD update
inside one tf.function. Variants, all measured in this run, timed in alternating blocks (``--rounds`` blocks of
``--repeat`` steps each, in turn) so that a slow spell of a shared machine falls on every side of a ratio:

1. fused: ``cudnn_port.layers.CudnnLSTM(256, num_layers=3, bidirectional=True)`` (``CudnnGRU`` with ``--mode
   gru``): one buffer, one CudnnRNNV3 call on a GPU, its CPU path (``tf_train.stack_train``) here;
2. keras stacked: 3 x ``Bidirectional(LSTM(256))`` with Keras' default ``use_cudnn="auto"`` (one cuDNN op per
   layer and direction on a GPU);
3. keras non-cuDNN: the same with ``use_cudnn=False``.

On a CPU, 2 and 3 run the same code (``--skip-non-cudnn`` leaves 3 out); the GPU targets (fused >= 1.3x faster
than 2, >= 5x than 3) need a GPU. The CPU target: fused >= 1.2x keras stacked for LSTM, >= 1x for GRU. Exit 1
when a target of the device it ran on is missed.

    python bench/bench_training.py [--mode lstm|gru|both] [--repeat 3] [--rounds 4] [--json]
"""
import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from bench_exports import time_blocks  # noqa: E402

LAYERS, INPUT, HIDDEN, STEPS, BATCH = 3, 128, 256, 50, 32
KINDS = ("fused", "keras stacked", "keras non-cuDNN")
TARGETS = {"CPU": {"keras stacked": {"lstm": 1.2, "gru": 1.0}},
           "GPU": {"keras stacked": {"lstm": 1.3, "gru": 1.3}, "keras non-cuDNN": {"lstm": 5.0, "gru": 5.0}}}
"""device -> variant -> mode -> the least speed-up of the fused layer over that variant."""


def build(kind, mode="lstm"):
    import keras

    from cudnn_port.layers import CudnnGRU, CudnnLSTM

    keras.utils.set_random_seed(0)
    inputs = keras.Input((None, INPUT))
    if kind == "fused":
        fused = CudnnLSTM if mode == "lstm" else CudnnGRU
        x = fused(HIDDEN, num_layers=LAYERS, bidirectional=True, return_sequences=True, seed=0)(inputs)
    else:
        use_cudnn = "auto" if kind == "keras stacked" else False
        x = inputs
        for _ in range(LAYERS):
            if mode == "lstm":
                rnn = keras.layers.LSTM(HIDDEN, return_sequences=True, use_cudnn=use_cudnn)
            else:
                rnn = keras.layers.GRU(HIDDEN, return_sequences=True, reset_after=True, use_cudnn=use_cudnn)
            x = keras.layers.Bidirectional(rnn)(x)
    return keras.Model(inputs, keras.layers.Dense(1)(x))


def train_step_fn(model):
    import keras
    import tensorflow as tf

    optimizer = keras.optimizers.SGD(1e-3)

    @tf.function
    def step(batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return lambda batch: float(step(batch))


def measure(mode, kinds, repeat, rounds):
    """Median ms per training step of each of ``kinds``, timed in alternating blocks."""
    rng = np.random.default_rng(0)
    batch = (rng.normal(size=(BATCH, STEPS, INPUT)).astype("float32"),
             rng.normal(size=(BATCH, STEPS, 1)).astype("float32"))
    calls = [(train_step_fn(build(kind, mode)), batch) for kind in kinds]
    return dict(zip(kinds, (seconds * 1e3 for seconds in time_blocks(calls, repeat, rounds))))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("lstm", "gru", "both"), default="lstm")
    parser.add_argument("--repeat", type=int, default=3, help="timed steps per block")
    parser.add_argument("--rounds", type=int, default=4, help="blocks per variant, alternating")
    parser.add_argument("--skip-non-cudnn", action="store_true", help="leave out keras non-cuDNN")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import tensorflow as tf

    device = "GPU" if tf.config.list_logical_devices("GPU") else "CPU"
    kinds = KINDS[:2] if args.skip_non_cudnn else KINDS
    results = {"device": device, "config": dict(layers=LAYERS, input=INPUT, hidden=HIDDEN, steps=STEPS,
                                                batch=BATCH, bidirectional=True), "modes": {}}
    for mode in (("lstm", "gru") if args.mode == "both" else (args.mode,)):
        ms = measure(mode, kinds, args.repeat, args.rounds)
        fused = ms["fused"]
        results["modes"][mode] = {"ms": ms, "speedup": {k: v / fused for k, v in ms.items() if k != "fused"}}
    results["targets_missed"] = missed_targets(results)
    if args.json:
        print(json.dumps(results, indent=2))
        return 1 if results["targets_missed"] else 0
    for mode, r in results["modes"].items():
        print(f"training step, 3-layer Bi{mode.upper()} I{INPUT} H{HIDDEN} T{STEPS} batch {BATCH}, on {device}:")
        for kind, ms in r["ms"].items():
            ratio = "" if kind == "fused" else f"   fused is {r['speedup'][kind]:.2f}x faster"
            print(f"  {kind:<18} {ms:8.1f} ms{ratio}")
    if device == "CPU":
        print("  (CPU target: fused >= 1.2x keras stacked for LSTM, >= 1x for GRU; the GPU targets, fused >= 1.3x "
              "keras stacked and >= 5x keras non-cuDNN, need a GPU)")
    print("every target met" if not results["targets_missed"] else
          "targets MISSED: " + "; ".join(results["targets_missed"]))
    return 1 if results["targets_missed"] else 0


def missed_targets(results):
    """Each target of :data:`TARGETS` for the device the run used that it measured and missed."""
    missed = []
    for mode, r in results["modes"].items():
        for kind, least in TARGETS[results["device"]].items():
            got = r["speedup"].get(kind)
            if got is not None and got < least[mode]:
                missed.append(f"{mode} fused over {kind} {got:.2f}x (target >= {least[mode]}x)")
    return missed


if __name__ == "__main__":
    raise SystemExit(main())
