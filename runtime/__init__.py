"""What readers and sinks alike stand on while a pipeline runs, so it sits below both.

File access on every Beam filesystem (``storage``, with ``threaded_file`` for local writes
that overlap encoding), spreading work over workers (``spread``), the batch of serialized
Examples that crosses from the encoder to the writers (``serialized_batch``) and the coders
that move batch elements between steps (``batch_coders``), and the line a native crash leaves
(``crash_note``).

Nothing here imports ``transforms/``, ``sinks/`` (but for its Beam-free ``format`` core) or
``pipelines/`` (tests/project/test_layering.py).
"""
