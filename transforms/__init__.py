"""Beam transforms that read and parse source records and build serialized Examples, plus the
Beam-free codec core they use (coercion, Example encoding and decoding)."""
