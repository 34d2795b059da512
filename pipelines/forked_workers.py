"""Local worker processes forked from a process that has already imported Beam and our
transforms, for ``--direct_running_mode=multi_processing``.

Beam's multi_processing mode starts each worker as a fresh ``python -m
apache_beam.runners.worker.sdk_worker_main``: every worker imports Beam, NumPy, PyArrow and our
modules again (about 2 CPU-seconds each), and it does so only once the runner reaches the first
stage, on the build's critical path. On a laptop that start-up ate the second core's gain
(bench/README.md, "Workers on one machine").

Here the workers come from a fork server (:mod:`multiprocessing`'s ``forkserver`` context,
runtime/fork_server.py): a clean, single-threaded Python that imports the worker's modules once
and then forks one child per worker, which starts in milliseconds. The command line starts the
server as soon as its flags ask for worker processes, before it imports Beam itself, so the
two imports run side by side. The children are ordinary Fn API SDK harnesses
(``sdk_worker_main``) talking gRPC to the runner, exactly as Beam's subprocess workers do; only
their start differs. The server never opens a gRPC channel, so forking it is safe.

Where the ``forkserver`` start method does not exist (Windows), the runner keeps Beam's own
subprocess workers.
"""

from __future__ import annotations

import os
from typing import Any

import grpc
from apache_beam.portability.api import beam_fn_api_pb2_grpc, endpoints_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner, worker_handlers
from apache_beam.runners.portability.local_job_service import BeamFnLoggingServicer
from apache_beam.transforms import environments
from apache_beam.utils import thread_pool_executor
from google.protobuf import json_format, text_format

from beam_tfrecords.runtime import fork_server

__all__ = ["URN", "ForkedWorkersEnvironment", "ForkedWorkersRunner"]

URN = "beam_tfrecords:env:forked_python_workers:v1"


def _run_worker(environ: dict[str, str]) -> None:
    """A forked worker's body: the Fn API SDK harness, configured as Beam configures its
    subprocess workers -- through the environment, the launcher's as it is now (the server
    was started with the one it had then) plus the harness's addresses. What our modules
    decided from the environment when the server imported them is decided again here."""
    from apache_beam.runners.worker import sdk_worker_main

    from beam_tfrecords.sinks.format.redact import redact_streams_if_asked

    os.environ.clear()
    os.environ.update(environ)
    redact_streams_if_asked()  # the command's filter on what the worker prints
    sdk_worker_main.main([])


@environments.Environment.register_urn(URN, bytes)
class ForkedWorkersEnvironment(environments.Environment):
    """The environment whose workers :class:`_ForkedWorkerHandler` forks."""

    def to_runner_api_parameter(self, context: Any) -> tuple[str, bytes]:
        """The environment's URN and its (empty) payload, for the pipeline proto.

        Args:
            context: Beam's PipelineContext (unused: there is nothing to register).

        Returns:
            ``(URN, b"")``.
        """
        return URN, b""

    @staticmethod
    def from_runner_api_parameter(payload: bytes, capabilities: Any, artifacts: Any,
                                  resource_hints: Any, context: Any
                                  ) -> ForkedWorkersEnvironment:
        """The environment a pipeline proto names (it has no settings of its own).

        Args:
            payload: the environment's payload (empty).
            capabilities: the SDK capabilities the proto lists.
            artifacts: the artifacts the proto lists.
            resource_hints: the proto's resource hints.
            context: Beam's PipelineContext (unused).

        Returns:
            The environment.
        """
        return ForkedWorkersEnvironment(capabilities, artifacts, resource_hints)

    @classmethod
    def default(cls) -> ForkedWorkersEnvironment:
        """The environment with this SDK's capabilities, as Beam's own environments build it.

        Returns:
            A ForkedWorkersEnvironment.
        """
        return cls(capabilities=environments.python_sdk_capabilities(), artifacts=())


@worker_handlers.WorkerHandler.register_environment(URN, bytes)
class _ForkedWorkerHandler(worker_handlers.GrpcWorkerHandler):
    """Starts one SDK harness forked from the fork server, and a logging service for it (as
    Beam's subprocess handler does), and waits for it at the end."""

    def __init__(self, payload: bytes, state: Any, provision_info: Any, grpc_server: Any
                 ) -> None:
        super().__init__(state, provision_info, grpc_server)
        self._process: Any = None
        self._logging_server: Any = None

    def start_worker(self) -> None:
        options = [("grpc.http2.max_pings_without_data", 0),
                   ("grpc.http2.max_ping_strikes", 0)]
        self._logging_server = grpc.server(thread_pool_executor.shared_unbounded_instance(),
                                           options=options)
        port = self._logging_server.add_insecure_port("localhost:0")
        beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(BeamFnLoggingServicer(),
                                                                 self._logging_server)
        self._logging_server.start()
        environ = {
            **os.environ,
            "CONTROL_API_SERVICE_DESCRIPTOR": text_format.MessageToString(
                endpoints_pb2.ApiServiceDescriptor(url=self.control_address)),
            "LOGGING_API_SERVICE_DESCRIPTOR": text_format.MessageToString(
                endpoints_pb2.ApiServiceDescriptor(url=f"localhost:{port}")),
            "PIPELINE_OPTIONS": json_format.MessageToJson(
                self.provision_info.provision_info.pipeline_options),
            "WORKER_ID": self.worker_id,
        }
        fork_server.start()  # unless the launcher did: the run's end stops it either way
        self._process = fork_server.context().Process(target=_run_worker, args=(environ,),
                                           name=f"beam-worker-{self.worker_id}", daemon=True)
        with worker_handlers.SUBPROCESS_LOCK, fork_server.signal_mask_kept():
            self._process.start()

    def stop_worker(self) -> None:
        try:
            if self._process is not None:
                self._process.join()
                if self._process.exitcode:
                    raise RuntimeError(f"worker process {self._process.pid} exited with "
                                       f"status {self._process.exitcode}")
        finally:
            if self._logging_server is not None:
                self._logging_server.stop(0)


class ForkedWorkersRunner(fn_runner.FnApiRunner):
    """The FnApiRunner with ``multi_processing`` workers forked from the fork server.

    FnApiRunner picks its workers' environment from ``--direct_running_mode`` when a pipeline
    runs; for ``multi_processing`` this runner keeps :class:`ForkedWorkersEnvironment` instead
    of Beam's subprocess command. Every other mode is Beam's.

    Args:
        **kwargs: FnApiRunner's arguments (``provision_info`` and the like).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._forked = ForkedWorkersEnvironment.default()

    def run_pipeline(self, pipeline: Any, options: Any) -> Any:
        """Run as FnApiRunner does, then stop the fork server the build started.

        Args:
            pipeline: the Beam pipeline.
            options: its PipelineOptions.

        Returns:
            FnApiRunner's result.
        """
        try:
            return super().run_pipeline(pipeline, options)
        finally:
            fork_server.stop()

    @property
    def _default_environment(self) -> Any:
        return self._chosen

    @_default_environment.setter
    def _default_environment(self, value: Any) -> None:
        if isinstance(value, environments.SubprocessSDKEnvironment) and fork_server.available():
            value = self._forked
        self._chosen = value
