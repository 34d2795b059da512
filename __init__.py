"""beam-tfrecords: Apache Beam pipelines that turn raw records into TFRecord files of
serialized ``tf.train.Example`` protos, without depending on TensorFlow.

The repository root *is* this package (``setup.py`` maps ``beam_tfrecords`` onto ``.``), so the
folders our users asked for -- ``pipelines/``, ``transforms/``, ``sinks/`` -- import as
``beam_tfrecords.pipelines`` and friends and never collide with other top-level packages.
"""

__version__ = "0.1.0"
