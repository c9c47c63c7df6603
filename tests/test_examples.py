"""The examples run end to end on tiny settings, and the beam search is checked against the Keras model."""
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
pytestmark = pytest.mark.slow  # the examples train and export


def test_tf1_flow(tmp_path):
    import tf1_flow

    assert tf1_flow.main(["--out", str(tmp_path)]) == 0


def test_bilstm_tagger(tmp_path):
    import bilstm_tagger

    assert bilstm_tagger.main(["--out", str(tmp_path / "tagger"), "--tiny"]) == 0
    assert (tmp_path / "tagger" / "model.onnx").exists() and (tmp_path / "tagger" / "model_parity.json").exists()


def test_char_lm_end_to_end_and_beam_scores_match_the_keras_model(tmp_path):
    """Train (tiny), export, then beam-search from the export; every returned beam's score must equal the log
    probability the Keras model itself gives that continuation, and k=1 must be greedy decoding."""
    import json

    import keras

    import char_lm

    assert char_lm.main(["all", "--tiny", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "vocab.json") as f:
        vocab = json.load(f)
    model = keras.saving.load_model(tmp_path / "model.keras")
    decoder = char_lm.Decoder(str(tmp_path / "export"))
    prompts = np.array([[3, 5, 7], [1, 2, 3]], np.int32)
    steps = 5
    sequences, scores = (t.numpy() for t in decoder.search(tf.constant(prompts), 3, steps))
    assert sequences.shape == (2, 3, steps) and np.all(np.diff(scores, axis=1) <= 1e-6)  # best beam first

    def log_prob(prompt, continuation):
        ids = np.concatenate([prompt, continuation])[None]
        logp = np.asarray(tf.nn.log_softmax(model(ids)))[0]
        return sum(logp[len(prompt) - 1 + t, c] for t, c in enumerate(continuation))

    for i, prompt in enumerate(prompts):
        for b in range(3):
            assert abs(log_prob(prompt, sequences[i, b]) - scores[i, b]) <= 1e-4, (i, b)
    greedy, _ = decoder.search(tf.constant(prompts), 1, steps)
    for i, prompt in enumerate(prompts):
        ids = list(prompt)
        for _ in range(steps):
            ids.append(int(np.argmax(np.asarray(model(np.array([ids], np.int32)))[0, -1])))
        assert greedy.numpy()[i, 0].tolist() == ids[len(prompt):]
    assert len(vocab) == model.layers[-1].units
