"""The sharded TFRecord sink and the Beam-free file format it writes (framing, compression)."""
