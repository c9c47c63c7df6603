"""A first Keras model as Keras' own tutorials write it, exported for CPU right after training.

    python examples/first_model.py --out models/first_model     # train one epoch (seconds), save, export, verify
    cudnn-port convert models/first_model/model.h5 out/first_model && cudnn-port verify out/first_model

Model: ``Sequential([Embedding(50, 16), LSTM(32), Dropout(0.2), Dense(3, activation="softmax")])`` with no
``keras.Input``: Keras builds it on ``fit``'s first batch (32 rows of 20 ids), and the export still takes any batch
and any length of int32 ids. Task (synthetic): the class of a sequence is its first id mod 3. The script trains,
exports in the same process (``cudnn_port.export``), checks the export (``cudnn_port.verify``), saves the model as
``model.keras`` and ``model.h5`` (both convert with ``cudnn-port convert``), and runs the exported ONNX and TFLite
models on 4 sequences of 7 ids.
"""
import argparse
import os

import numpy as np


def build_and_train(seed=0, rows=256, steps=20):
    import keras

    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.layers.Embedding(50, 16), keras.layers.LSTM(32), keras.layers.Dropout(0.2),
                              keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, 50, size=(rows, steps))
    model.fit(ids, ids[:, 0] % 3, epochs=1, batch_size=32, verbose=0)
    return model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="models/first_model", help="folder for model.keras and model.h5")
    parser.add_argument("--export", default="out/first_model_export", help="folder for the in-process export")
    args = parser.parse_args(argv)

    import cudnn_port

    model = build_and_train()
    manifest = cudnn_port.export(model, args.export, force=True)  # raises ParityError if an artifact disagrees
    report = cudnn_port.verify(args.export)
    print(f"export: {args.export}, inputs {[r.to_dict() for r in manifest.model_input_specs]}, verify "
          f"{'passed' if report['passed'] else 'FAILED'}")
    os.makedirs(args.out, exist_ok=True)
    model.save(os.path.join(args.out, "model.keras"))
    model.save(os.path.join(args.out, "model.h5"))

    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    ids = np.random.default_rng(1).integers(1, 50, size=(4, 7)).astype("int32")  # not fit's batch of 32 x 20
    want = model.predict(ids, verbose=0)
    session = ort.InferenceSession(os.path.join(args.export, "model.onnx"), providers=["CPUExecutionProvider"])
    onnx_out = session.run(None, {"input_layer": ids})[0]
    tflite_out = Interpreter(os.path.join(args.export, "model.tflite")).get_signature_runner()(input_layer=ids)
    for name, got in (("onnx", onnx_out), ("tflite", tflite_out["output_0"])):
        print(f"{name} on 4 x 7 int32 ids: max abs error against Keras {np.abs(got - want).max():.2e}")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
