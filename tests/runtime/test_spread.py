"""``Spread`` reshuffles except on a single in-process worker, where it would only cost a stage."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecords.runtime.spread import Spread, runs_in_one_process


def leaf_labels(p: beam.Pipeline) -> list[str]:
    proto = p.to_runner_api()
    return [t.unique_name for t in proto.components.transforms.values() if not t.subtransforms]


@pytest.mark.parametrize("args,runner,one", [
    ([], None, True),
    ([], fn_runner.FnApiRunner(), True),
    ([], type("CommandLineRunner", (fn_runner.FnApiRunner,), {})(), True),
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], None, False),
    (["--direct_running_mode=multi_threading"], None, False),
    (["--direct_num_workers=2"], None, False),
    (["--runner=BundleBasedDirectRunner"], None, False),
    (["--runner=PortableRunner"], None, False),
])
def test_which_pipelines_run_in_one_process(args, runner, one):
    p = beam.Pipeline(runner=runner, options=PipelineOptions(args))
    assert runs_in_one_process(p.runner, p.options) is one


# Several workers as threads of this process: the same expansion as with worker processes
# (test_which_pipelines_run_in_one_process), without starting any. Spread across Beam's own
# worker processes runs in tests/e2e/test_shuffle_runners.py (one file read in ranges).
@pytest.mark.parametrize("args,reshuffled", [
    ([], False),
    (["--direct_running_mode=multi_threading", "--direct_num_workers=2"], True),
])
@pytest.mark.slow
def test_spread_keeps_every_element_and_reshuffles_only_with_several_workers(args, reshuffled):
    p = beam.Pipeline(options=PipelineOptions(args))
    out = p | beam.Create(list(range(50))) | "Spread" >> Spread()
    assert_that(out, equal_to(list(range(50))))
    assert any(label.startswith("Spread/") for label in leaf_labels(p)) is reshuffled
    p.run().wait_until_finish()


def test_the_command_lines_own_runner_runs_in_one_process():
    """The command line runs a subclass of the FnApiRunner; in memory with one worker it is
    one process, so the sink finalizes in one step and the readers do not reshuffle."""
    from beam_tfrecords.pipelines.runners import runner_for

    options = PipelineOptions([])
    runner = runner_for(options)
    assert type(runner) is not fn_runner.FnApiRunner
    assert runs_in_one_process(runner, options)
    two = PipelineOptions(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    assert not runs_in_one_process(runner_for(two), two)
