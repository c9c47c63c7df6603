"""Crafted SavedModels for tests/test_untrusted_graphs.py, each built with TensorFlow on CPU into a folder of the
test's tmp_path: a graph that, if loaded and run, writes a file, prints into a file, reads an address, waits on a
queue for ever, calls Python, or allocates gigabytes from a few hundred bytes."""
import os

import numpy as np


def _save(module, folder, fn):
    import tensorflow as tf

    tf.saved_model.save(module, str(folder), signatures={"serving_default": fn})
    return folder


def write_file(folder, target):
    """serving_default(x) = 2 x, and tf.io.write_file(target) on the way."""
    import tensorflow as tf

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def serve(self, x):
            with tf.control_dependencies([tf.io.write_file(str(target), "import os  # planted\n")]):
                return {"y": 2 * x}

    model = Model()
    return _save(model, folder, model.serve)


def print_to_file(folder, target):
    """serving_default(x) = x + 1 with tf.print(x, output_stream="file://target")."""
    import tensorflow as tf

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def serve(self, x):
            with tf.control_dependencies([tf.print(x, output_stream=f"file://{target}")]):
                return {"y": x + 1}

    model = Model()
    return _save(model, folder, model.serve)


def read_address_at_load(folder, vocab, address="gs://cudnn-port-test-bucket/vocab.txt"):
    """A lookup table whose initializer (run when TensorFlow loads the model) reads ``address``: built reading the
    local file ``vocab`` (TensorFlow runs the initializer while saving), then the file name edited in
    saved_model.pb."""
    import tensorflow as tf

    class Table(tf.saved_model.experimental.TrackableResource):
        def _create_resource(self):
            return tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64)

        def _initialize(self):
            keys = tf.strings.split(tf.io.read_file(str(vocab)))
            return tf.raw_ops.LookupTableImportV2(table_handle=self.resource_handle, keys=keys,
                                                  values=tf.range(tf.size(keys, out_type=tf.int64)))

    class Model(tf.Module):
        def __init__(self):
            super().__init__()
            self.table = Table()

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def serve(self, words):
            return {"ids": tf.raw_ops.LookupTableFindV2(table_handle=self.table.resource_handle, keys=words,
                                                        default_value=tf.constant(-1, tf.int64))}

    model = Model()
    _save(model, folder, model.serve)

    def to_address(tensor):
        if list(tensor.string_val) == [str(vocab).encode()]:
            tensor.string_val[0] = address.encode()
            return True
        return False

    assert _edit_constants(folder, to_address), "no constant holds the vocabulary's file name"
    return folder


def _edit_constants(folder, edit) -> int:
    """Apply ``edit(tensor) -> bool`` to every constant of every function in folder/saved_model.pb; how many it
    changed."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(folder, "saved_model.pb")
    proto = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    edited = sum(edit(node.attr["value"].tensor) for function in proto.meta_graphs[0].graph_def.library.function
                 for node in function.node_def if node.op == "Const")
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())
    return edited


def dequeue(folder):
    """serving_default(x) = x + a value dequeued from an empty FIFO queue: blocks for ever when run."""
    import tensorflow as tf

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def serve(self, x):
            queue = tf.raw_ops.FIFOQueueV2(component_types=[tf.float32], shapes=[[]])
            value = tf.raw_ops.QueueDequeueV2(handle=queue, component_types=[tf.float32])[0]
            return {"y": x + value}

    model = Model()
    return _save(model, folder, model.serve)


def python_callback(folder):
    """serving_default(x) = tf.py_function(np.square)(x)."""
    import tensorflow as tf

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def serve(self, x):
            return {"y": tf.py_function(lambda v: np.square(v.numpy()), [x], tf.float32)}

    model = Model()
    return _save(model, folder, model.serve)


def constant_bomb(folder, elements=2 ** 29):
    """serving_default(x) = x + reduce_sum(c), where constant c's saved_model.pb entry is edited to declare
    ``elements`` floats while it stores one (a few hundred bytes in all)."""
    import tensorflow as tf

    class Model(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def serve(self, x):
            return {"y": x + tf.reduce_sum(tf.constant([0.5, 0.25], name="bomb"))}

    model = Model()
    _save(model, folder, model.serve)

    def declare(tensor):
        if list(tensor.float_val) != [0.5, 0.25] and tensor.tensor_content != np.float32([0.5, 0.25]).tobytes():
            return False
        tensor.ClearField("tensor_content")
        del tensor.float_val[:]
        tensor.float_val.append(0.5)
        tensor.tensor_shape.dim[0].size = elements
        return True

    assert _edit_constants(folder, declare), "no constant [0.5, 0.25]"
    return folder
