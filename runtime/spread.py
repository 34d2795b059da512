"""``Spread``: a Reshuffle that spreads work over workers -- where there is more than one.

Readers reshuffle their file list and the sink its finalize plan so that the work lands on
many workers instead of the one that listed it. In Beam's in-process direct runner (one
worker, ``--direct_running_mode=in_memory``, the default) there is nobody to spread to, and
each Reshuffle costs a group-by-key stage, a sizable share of a small build (bench/README.md).
Every other runner and mode -- worker processes, threads, Dataflow, Flink, the portable
runner, the bundle-based direct runner -- gets the Reshuffle.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

__all__ = ["Spread", "runs_in_one_process"]

# The runners that execute in this process: Beam's direct runner and the engine it (and
# pipelines/runners.py) runs batch pipelines on.
_IN_PROCESS = frozenset({"SwitchingDirectRunner", "DirectRunner", "FnApiRunner"})


def runs_in_one_process(runner: object, options: PipelineOptions | None) -> bool:
    """True when ``runner`` (a pipeline's runner object) runs it on one in-process worker.

    Args:
        runner: the pipeline's runner object.
        options: its options (None: the defaults).

    Returns:
        True for Beam's direct runner (or an FnApiRunner, or a subclass of either) in
        memory with one worker.
    """
    # By class name (the runner's modules stay unimported), subclasses included: the
    # command line runs an FnApiRunner of its own (pipelines/forked_workers.py).
    if not any(cls.__name__ in _IN_PROCESS for cls in type(runner).__mro__):
        return False
    direct = (options or PipelineOptions([])).view_as(DirectOptions)
    return direct.direct_running_mode == "in_memory" and direct.direct_num_workers == 1


class Spread(beam.PTransform):
    """``beam.Reshuffle()``, except on a single in-process worker, where it is the identity."""

    def expand(self, pcoll):
        if runs_in_one_process(pcoll.pipeline.runner, pcoll.pipeline.options):
            return pcoll
        return pcoll | beam.Reshuffle()
