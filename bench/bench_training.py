"""Training-step benchmark: the fused layer vs Keras 3 stacks of the same size, in one process.

Model: a 3-layer bidirectional LSTM (input 128, hidden 256) over 50 steps, batch 32, then Dense(1); one step is
forward + backward + SGD update inside one tf.function. Variants, all measured in this run:

1. fused: ``cudnn_port.layers.CudnnLSTM(256, num_layers=3, bidirectional=True)``: one buffer, one CudnnRNNV3
   call on a GPU, its CPU path here;
2. keras stacked: 3 x ``Bidirectional(LSTM(256))`` with Keras' default ``use_cudnn="auto"`` (one cuDNN op per
   layer and direction on a GPU);
3. keras non-cuDNN: the same with ``use_cudnn=False``.

On a CPU, 2 and 3 run the same code; the GPU targets (fused >= 1.3x faster than 2, >= 5x than 3) need a GPU.

    python bench/bench_training.py [--repeat 10] [--json]
"""
import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from cudnn_port.benchmark import time_call  # noqa: E402

LAYERS, INPUT, HIDDEN, STEPS, BATCH = 3, 128, 256, 50, 32


def build(kind):
    import keras

    from cudnn_port.layers import CudnnLSTM

    keras.utils.set_random_seed(0)
    inputs = keras.Input((None, INPUT))
    if kind == "fused":
        x = CudnnLSTM(HIDDEN, num_layers=LAYERS, bidirectional=True, return_sequences=True, seed=0)(inputs)
    else:
        x = inputs
        for _ in range(LAYERS):
            x = keras.layers.Bidirectional(keras.layers.LSTM(
                HIDDEN, return_sequences=True, use_cudnn="auto" if kind == "keras stacked" else False))(x)
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    import tensorflow as tf

    rng = np.random.default_rng(0)
    batch = (rng.normal(size=(BATCH, STEPS, INPUT)).astype("float32"),
             rng.normal(size=(BATCH, STEPS, 1)).astype("float32"))
    device = "GPU" if tf.config.list_logical_devices("GPU") else "CPU"
    results = {"device": device, "config": dict(layers=LAYERS, input=INPUT, hidden=HIDDEN, steps=STEPS,
                                                batch=BATCH, bidirectional=True), "ms": {}}
    for kind in ("fused", "keras stacked", "keras non-cuDNN"):
        model = build(kind)
        results["ms"][kind] = time_call(train_step_fn(model), batch, args.repeat) * 1e3
    fused = results["ms"]["fused"]
    results["speedup"] = {k: v / fused for k, v in results["ms"].items() if k != "fused"}
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"training step, 3-layer BiLSTM I{INPUT} H{HIDDEN} T{STEPS} batch {BATCH}, on {device}:")
    for kind, ms in results["ms"].items():
        ratio = "" if kind == "fused" else f"   fused is {results['speedup'][kind]:.2f}x faster"
        print(f"  {kind:<18} {ms:8.1f} ms{ratio}")
    if device == "CPU":
        print("  (GPU targets: fused >= 1.3x keras stacked, >= 5x keras non-cuDNN; they need a GPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
