"""The Beam-free Example codec: coercion, the wire format, the per-row and columnar encoders,
feature specs, splits and the parsing of their config mappings.

Nothing here imports Beam, a filesystem client or ``pipelines/`` (tests/project/test_layering.py),
so it is tested directly and runs anywhere: workers, launchers, notebooks.
"""
