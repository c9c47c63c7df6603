"""Train a model with cudnn_port fused layers under a tf.distribute strategy; print the result as JSON.

    python distributed_fit.py mirrored              # MirroredStrategy over two logical CPU devices: Model.fit
    TF_CONFIG=... python distributed_fit.py worker  # one worker of a MultiWorkerMirroredStrategy cluster: a
                                                    # custom loop (strategy.run), since Keras 3.15's Model.fit
                                                    # fails under that strategy even for a Dense-only model

Run as its own process: logical devices and cluster settings must be fixed before TensorFlow starts.
"""
import hashlib
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np
import tensorflow as tf


def main(kind):
    if kind == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    else:
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import keras

    from cudnn_port.layers import CudnnGRU, CudnnLSTM

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 6, 4)).astype("float32")
    y = np.cumsum(x[..., :1], axis=1).astype("float32")
    with strategy.scope():
        inputs = keras.Input((None, 4))
        h = CudnnLSTM(6, num_layers=2, bidirectional=True, return_sequences=True, seed=1)(inputs)
        h = CudnnGRU(5, return_sequences=True, seed=2)(h)
        model = keras.Model(inputs, keras.layers.Dense(1)(h))
        model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)  # a global batch of 16, split over replicas
    if kind == "mirrored":
        history = model.fit(data, epochs=8, verbose=0).history["loss"]
    else:
        history = custom_loop(strategy, model, data, epochs=8)
    buffers = [v for v in model.trainable_variables if v.path.endswith("opaque_kernel")]
    copies = [[np.asarray(c) for c in getattr(v._value, "values", (v._value,))] for v in buffers]  # per replica
    digest = hashlib.sha256(b"".join(np.asarray(v.numpy()).tobytes() for v in buffers)).hexdigest()
    print(json.dumps({"replicas": strategy.num_replicas_in_sync, "loss": history, "buffers": len(buffers),
                      "copies": [len(c) for c in copies],
                      "copies_agree": all(np.array_equal(c[0], other) for c in copies for other in c[1:]),
                      "digest": digest}))


def custom_loop(strategy, model, data, epochs):
    """Synchronous data-parallel training with strategy.run; returns the mean loss of each epoch."""
    optimizer = model.optimizer
    dist = strategy.experimental_distribute_dataset(data)

    @tf.function
    def step(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                # mean over the global batch: each replica divides by the global count
                loss = tf.reduce_sum(tf.square(model(x, training=True) - y)) / tf.cast(16 * 6, tf.float32)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        return strategy.reduce("SUM", strategy.run(replica, args=(x, y)), axis=None)

    history = []
    for _ in range(epochs):
        losses = [float(step(x, y)) for x, y in dist]
        history.append(sum(losses) / len(losses))
    return history


if __name__ == "__main__":
    main(sys.argv[1])
