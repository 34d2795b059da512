# One image, two roles: the worker for Dataflow custom containers and Flink's Beam Python
# workers (the SDK image's entry point, /opt/apache/beam/boot, stays), and the Flex Template
# launcher (Dataflow runs the launcher binary copied in below, which runs
# FLEX_TEMPLATE_PYTHON_PY_FILE with the template's parameters).
# The Beam version here must equal BEAM_VERSION in setup.py (tests/project/test_packaging.py checks
# that the two agree); the SDK image brings the matching Python and the worker boot loader.
ARG BEAM_VERSION=2.77.0
# Google's Python 3.11 launcher base image; only its launcher binary is used. Pin a release
# you have launched with (gcr.io/dataflow-templates-base lists them).
ARG LAUNCHER_TAG=flex_templates_base_image_release_20240628_RC00
FROM gcr.io/dataflow-templates-base/python311-template-launcher-base:${LAUNCHER_TAG} AS launcher

FROM apache/beam_python3.11_sdk:${BEAM_VERSION}
COPY --from=launcher /opt/google/dataflow/python_template_launcher /opt/google/dataflow/python_template_launcher

WORKDIR /opt/beam_tfrecords
# Only what the package needs: the repository root is the package (see setup.py), whose
# modules are the root's *.py files; setup.py reads README.md.
COPY *.py README.md ./
COPY pipelines ./pipelines
COPY runtime ./runtime
COPY transforms ./transforms
COPY sinks ./sinks
COPY configs ./configs
COPY locks/docker-py3.11.txt ./locks/

# The SDK image already holds Beam and the versions Beam pins for it (Beam publishes them:
# locks/beam-sdk-image-py3.11.txt). locks/docker-py3.11.txt is setup.py resolved with those
# versions held, so this changes only the packages its header lists, from files whose hashes
# it pins (--require-hashes --no-deps). Then the package alone, built by the image's own
# setuptools (--no-build-isolation: nothing unlocked is downloaded), and pip check fails the
# build on any conflict with the rest of the image. scripts/smoke.py replays this stage on a
# virtual environment standing in for the image (no Docker engine runs in our tests).
RUN pip install --no-cache-dir --require-hashes --no-deps -r locks/docker-py3.11.txt \
    && pip install --no-cache-dir --no-deps --no-build-isolation . \
    && pip check

# The launcher runs pipelines/flex/main.py (in a folder of its own, so that the script's
# folder on sys.path shadows nothing) and hands setup.py to the job as --setup_file. Everything
# is installed above, so pip must not resolve dependencies again at launch or on workers.
ENV FLEX_TEMPLATE_PYTHON_PY_FILE=/opt/beam_tfrecords/pipelines/flex/main.py \
    FLEX_TEMPLATE_PYTHON_SETUP_FILE=/opt/beam_tfrecords/setup.py \
    PIP_NO_DEPS=True

# No ENTRYPOINT here: the SDK image's /opt/apache/beam/boot starts the Beam worker.
