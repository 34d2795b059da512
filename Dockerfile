# Worker image for Dataflow custom containers and Flink's Beam Python workers.
# The Beam version here must equal BEAM_VERSION in setup.py (tests/test_packaging.py checks
# that the two agree); the SDK image brings the matching Python and the worker boot loader.
ARG BEAM_VERSION=2.77.0
FROM apache/beam_python3.11_sdk:${BEAM_VERSION}

WORKDIR /opt/beam_tfrecords
# Only what the package needs: the repository root is the package (see setup.py).
COPY setup.py __init__.py ./
COPY pipelines ./pipelines
COPY transforms ./transforms
COPY sinks ./sinks
COPY configs ./configs

# Non-editable install with the versions pinned in setup.py; pip check fails the build on
# any conflict with what the SDK image already has.
RUN pip install --no-cache-dir . && pip check

# The SDK image's entry point (/opt/apache/beam/boot) stays: it starts the Beam worker.
