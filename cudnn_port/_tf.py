"""The one lazy TensorFlow import: heavy, so only the code paths that need it pay for it."""
import os


def import_tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf
