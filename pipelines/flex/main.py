"""The script a Dataflow Flex Template launcher runs (FLEX_TEMPLATE_PYTHON_PY_FILE).

It lives in a folder of its own because Python puts the script's folder first on sys.path:
next to the modules of ``pipelines/`` it would make each importable a second time under a
top-level name (``config``, ``progress``), and any named like a standard-library module would
shadow it (tests/project/test_layering.py keeps the package free of those). All the logic is in the
installed package, ``beam_tfrecords.pipelines.flex_template``.
"""

import sys

from beam_tfrecords.pipelines.flex_template import main

if __name__ == "__main__":
    sys.exit(main())
