"""The Beam-free TFRecord format pieces: framing and compression, shard planning,
the output layout's names and the manifest document.

Nothing here imports Beam, a filesystem client or ``pipelines/`` (tests/project/test_layering.py).
"""
