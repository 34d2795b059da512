"""Protocol buffer definitions wire-compatible with TensorFlow's ``tf.train.Example``.

The generated module registers its messages in a private descriptor pool (see
``scripts/gen_proto.py``), so it can be imported in the same process as TensorFlow, whose own
``tensorflow.Example`` lives in the default pool.
"""
