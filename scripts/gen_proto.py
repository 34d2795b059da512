"""Regenerate ``transforms/proto/example_pb2.py`` from ``transforms/proto/example.proto``.

Usage (from the repository root, in the development virtual environment, which pins
``grpcio-tools`` to a release whose protoc matches our ``protobuf`` runtime range)::

    python scripts/gen_proto.py          # rewrite the generated module
    python scripts/gen_proto.py --check  # exit 1 if the committed module is stale

Why a script instead of a bare ``protoc`` call: the generated module is patched to register its
messages in a *private* descriptor pool. Our messages keep TensorFlow's package and names
(``tensorflow.Example``) for wire compatibility, and TensorFlow registers those names in the
default pool; two different files defining the same full names in one pool is an error, so a
user importing both TensorFlow and beam_tfrecords in one process would crash. A private pool
makes the two independent.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO = ROOT / "transforms" / "proto" / "example.proto"
TARGET = ROOT / "transforms" / "proto" / "example_pb2.py"
# The name the file is registered under; it only has to be unique within our private pool.
PROTO_NAME = "beam_tfrecords/example.proto"

_DEFAULT_POOL = "_descriptor_pool.Default().AddSerializedFile("
_PRIVATE_POOL = "_POOL.AddSerializedFile("
_POOL_DECL = (
    "# Patched by scripts/gen_proto.py: a private pool, so TensorFlow's own tensorflow.Example\n"
    "# in the default pool never collides with ours.\n"
    "_POOL = _descriptor_pool.DescriptorPool()\n"
)


def generate() -> str:
    """Run protoc (from grpcio-tools) and return the patched module text."""
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / PROTO_NAME
        src.parent.mkdir(parents=True)
        shutil.copyfile(PROTO, src)
        subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", f"--python_out={tmp}",
             PROTO_NAME],
            check=True,
        )
        text = (pathlib.Path(tmp) / PROTO_NAME).with_name("example_pb2.py").read_text()
    if text.count(_DEFAULT_POOL) != 1:
        raise SystemExit("protoc output changed shape: cannot find the default-pool registration")
    text = text.replace(_DEFAULT_POOL, _PRIVATE_POOL)
    return text.replace("\nDESCRIPTOR = ", "\n" + _POOL_DECL + "DESCRIPTOR = ", 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check the committed module")
    args = parser.parse_args(argv)
    text = generate()
    if args.check:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run python scripts/gen_proto.py",
                  file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
