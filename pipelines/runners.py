"""Which Beam runner object a build runs on, when the options name the DirectRunner.

Beam's ``DirectRunner`` (the ``SwitchingDirectRunner``) first offers every batch pipeline to
the Prism runner: on first use that downloads a Go binary from GitHub and runs the job in it;
where there is no internet (CI, locked-down laptops, this project's machine) it translates the
pipeline, fails to download, and only then falls back to the in-process ``FnApiRunner``. So
the same ``--runner=DirectRunner`` build runs on two different engines depending on the
network, and pays for the failed attempt on every build (measured in bench/README.md).

Our builds are batch pipelines of our own transforms, which the FnApiRunner always supports
(no streaming sources, no real-time timers), so a DirectRunner build goes to it straight
away, configured exactly as the DirectRunner configures it -- including
``--direct_running_mode`` and ``--direct_num_workers``, which the FnApiRunner reads itself.
The engine our tests exercise is the one users get. Any other runner name is left to Beam.

Which runners a build runs on (:func:`check_runner`, before anything is written): the ones we
test -- DirectRunner in every mode, PortableRunner (embedded job service, and the protocol
Flink and Dataflow speak), DataflowRunner (staged offline) and FlinkRunner (as a portable
job) -- run silently; a runner known not to run a build is refused in one line saying what it
lacks; any other runner Beam can load gets one warning line and is tried.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions, StandardOptions
from apache_beam.runners.runner import PipelineRunner

from beam_tfrecords.runtime.fork_server import DIRECT_NAMES

# The runners known not to run a build are the sink's to name (it is what they cannot run).
from beam_tfrecords.sinks.dataset import (
    UNSUPPORTED_RUNNERS,
    UnsupportedRunner,
    refuse_unsupported,
)

__all__ = ["DIRECT_NAMES", "TESTED_RUNNERS", "UNSUPPORTED_RUNNERS",
           "BuildOptions", "UnsupportedRunner", "balanced_split_bytes", "check_runner",
           "refuse_unsupported", "runner_for", "runner_key", "runs_in_process",
           "worker_processes"]

# The runners a build is tested on (tests/e2e/test_sink_runners.py,
# tests/pipelines/test_dataflow_staging.py), by
# runner_key; FnApiRunner and BundleBasedDirectRunner are the DirectRunner's engines.
TESTED_RUNNERS = DIRECT_NAMES | {"fnapirunner", "bundlebaseddirectrunner", "portable",
                                 "portablerunner", "dataflow", "dataflowrunner", "flink",
                                 "flinkrunner"}


class BuildOptions(PipelineOptions):
    """The command's pipeline options: Beam's, with each view made once.

    While a graph is built, Beam asks the pipeline's options for a view at every type check
    (``typehints.is_consistent_with`` -> ``view_as(TypeOptions)``), and each view parses the
    flags again with a new argparse parser: about 200 parses, a tenth of a second or more of
    CPU, in every build. A view holds no values of its own -- every view shares this object's
    dictionary of values -- so handing back the one made before is what a new one would be.
    """

    def view_as(self, cls: type) -> PipelineOptions:
        """The options seen as ``cls``, made on first use and kept.

        Args:
            cls: a PipelineOptions class.

        Returns:
            The view, sharing this object's values.
        """
        views = self.__dict__.setdefault("_views", {})  # not an option: Beam's setattr refuses
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self) -> dict:
        state = dict(super().__getstate__())
        state.pop("_views", None)  # made again on first use
        return state


def runner_key(options: PipelineOptions) -> str:
    """The options' runner as Beam looks it up: the class name, lower case (``directrunner``
    for none, ``daskrunner`` for ``apache_beam.runners.dask.dask_runner.DaskRunner``).

    Args:
        options: the pipeline's options.

    Returns:
        The runner's key.
    """
    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return "directrunner"
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.rsplit(".", 1)[-1].lower()


def check_runner(options: PipelineOptions) -> str | None:
    """Refuse a runner that cannot run a build (:class:`UnsupportedRunner`, one line); return
    the warning line for a runner we do not test, None for one we do.

    Args:
        options: the pipeline's options.

    Returns:
        The warning, or None.

    Raises:
        UnsupportedRunner: the runner cannot run a build.
    """
    key = runner_key(options)
    runner = options.view_as(StandardOptions).runner
    name = runner if isinstance(runner, str) else type(runner).__name__
    refuse_unsupported(name, "--runner ")
    if key in TESTED_RUNNERS:
        return None
    if isinstance(runner, str):  # a name Beam must find: say so now, not in a traceback
        from apache_beam.runners.runner import create_runner

        try:
            create_runner(runner)
        except ValueError:
            raise UnsupportedRunner(
                f"--runner {name}: Beam knows no runner of that name (give a runner class "
                "name such as DirectRunner, PortableRunner, DataflowRunner, FlinkRunner, or "
                "the fully qualified name of a PipelineRunner subclass)") from None
        except Exception as error:  # noqa: BLE001 -- its module or a dependency is missing
            raise UnsupportedRunner(f"--runner {name}: Beam cannot load it "
                                    f"({type(error).__name__}: {error})") from None
    return (f"--runner {name} is not a runner beam-tfrecords is tested on (DirectRunner, "
            "PortableRunner, DataflowRunner, FlinkRunner); trying it")


def runs_in_process(options: PipelineOptions) -> bool:
    """Whether the runner runs the job inside this process, so that ending the process ends
    the job: the DirectRunner's engines, and PortableRunner's embedded job service.

    Args:
        options: the pipeline's options.

    Returns:
        Whether the job runs in this process.
    """
    key = runner_key(options)
    if key in DIRECT_NAMES or key in ("fnapirunner", "bundlebaseddirectrunner",
                                      "testdirectrunner"):
        return True
    if key in ("portable", "portablerunner"):
        return options.view_as(PortableOptions).job_endpoint == "embed"
    return False


def worker_processes(beam_args: list[str]) -> int:
    """How many worker processes a DirectRunner build's options ask for: ``N`` with
    ``--direct_running_mode=multi_processing --direct_num_workers=N``, else 1 (in-process,
    threads, or another runner).

    Args:
        beam_args: the Beam flags of the command line.

    Returns:
        The number of worker processes.
    """
    from apache_beam.options.pipeline_options import DirectOptions

    options = PipelineOptions(beam_args)
    if runner_key(options) not in DIRECT_NAMES | {"fnapirunner"}:
        return 1
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode != "multi_processing":
        return 1
    return max(1, direct.direct_num_workers or 1)


def balanced_split_bytes(sizes: list[int], split_bytes: int, workers: int) -> int:
    """The range size that gives ``workers`` processes equal shares of the input: at most
    ``split_bytes``, lowered so that the ranges come in a multiple of ``workers``.

    The DirectRunner deals a stage's elements out to its worker processes once, round robin,
    and never rebalances: a 290 MB file in five 58 MB ranges gives one of two workers three
    ranges and the other two, and the build waits for the three (at most 1.67x instead of
    2x). Six ranges of 48 MB give each three.

    Args:
      sizes: the input files' sizes in bytes (0: unknown, read whole).
      split_bytes: the configured largest range (``source.split_bytes``).
      workers: the worker processes the ranges are dealt to.

    Returns:
      ``split_bytes``, or the smaller size that makes a multiple of ``workers`` ranges (for
      one file exactly; for several, the ranges of the total)."""
    total = sum(size for size in sizes if size > 0)
    units = sum(-(-size // split_bytes) for size in sizes if size > 0)
    if workers < 2 or units == 0 or units % workers == 0:
        return split_bytes
    wanted = workers * -(-units // workers)
    return max(1, -(-total // wanted))


def runner_for(options: PipelineOptions) -> PipelineRunner | None:
    """The in-process FnApiRunner for a batch DirectRunner build; None: let Beam choose.

    Args:
        options: the pipeline's options.

    Returns:
        The runner, or None.
    """
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
    from beam_tfrecords.pipelines.forked_workers import ForkedWorkersRunner

    return ForkedWorkersRunner(provision_info=provision)
