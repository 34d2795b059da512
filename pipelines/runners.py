"""Which Beam runner object a build runs on, when the options name the DirectRunner.

Beam's ``DirectRunner`` (the ``SwitchingDirectRunner``) first offers every batch pipeline to
the Prism runner: on first use that downloads a Go binary from GitHub and runs the job in it;
where there is no internet (CI, locked-down laptops, this project's machine) it translates the
pipeline, fails to download, and only then falls back to the in-process ``FnApiRunner``. So
the same ``--runner=DirectRunner`` build runs on two different engines depending on the
network, and pays ~0.3-0.4 s for the failed attempt on every build (bench/README.md).

Our builds are batch pipelines of our own transforms, which the FnApiRunner always supports
(no streaming sources, no real-time timers), so a DirectRunner build goes to it straight
away, configured exactly as the DirectRunner configures it -- including
``--direct_running_mode`` and ``--direct_num_workers``, which the FnApiRunner reads itself.
The engine our tests exercise is the one users get. Any other runner name is left to Beam.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.runners.runner import PipelineRunner

__all__ = ["DIRECT_NAMES", "runner_for"]

# How Beam accepts the direct runner's name (its runner lookup ignores case).
DIRECT_NAMES = frozenset({"direct", "directrunner", "switchingdirectrunner"})


def runner_for(options: PipelineOptions) -> PipelineRunner | None:
    """The in-process FnApiRunner for a batch DirectRunner build; None: let Beam choose."""
    standard = options.view_as(StandardOptions)
    runner = standard.runner
    if runner is not None and not isinstance(runner, str):
        return None  # a runner object: the caller chose already
    if (runner or "DirectRunner").lower() not in DIRECT_NAMES or standard.streaming:
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # Worker processes (multi_processing) read the pipeline options from the provision info,
    # as under the DirectRunner: without it they would not see e.g. the progress directory.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    return fn_runner.FnApiRunner(provision_info=provision)
