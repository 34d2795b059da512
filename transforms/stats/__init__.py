"""Per-feature statistics of the Examples we write, in TensorFlow Data Validation's format.

Mergeable accumulators (:mod:`accumulators` per stored key, :mod:`dataset_stats` per split)
are fed from the columns the encoders already hold -- numpy arrays and Arrow arrays, or
Python values on the per-row path -- and merged in any grouping and order; their result is
encoded by :mod:`statistics_wire` as a
``DatasetFeatureStatisticsList`` (tensorflow_metadata's statistics.proto) with our own wire
code. The sketches they use say, each in its module docstring, what they hold, their memory
and error bounds, and which of their results depend on how rows were split into bundles:

* :mod:`order_sketch` -- quantiles and histograms of numbers (exact up to a capacity of
  distinct values, then a grid that depends only on the multiset of values);
* :mod:`exact_moments` -- sums and sums of squares held exactly, so mean and standard
  deviation are correctly rounded and the same bytes whatever the merge order;
* :mod:`distinct` -- unique counts (exact up to a capacity, then HyperLogLog);
* :mod:`top_values` -- frequent values (exact up to a capacity, then Misra-Gries).

Pure: numpy, pyarrow and the standard library; no Beam, no I/O (tests/project/test_layering.py).
"""
