"""Runs one README consumer snippet unchanged and checks what it made (run_heavy.py's helper).

    <env python> harness.py CONSUMER SNIPPET.py EXPECTED.json RESULT.json

Run in a folder where ``output/demo`` is the data set root. The snippet is exec'd as
``__main__``; then its variables are read: ``loader`` (pytorch: iterated once more, every
record converted), ``batch``/``pipe``/``features`` (dali: ``pipe.run()`` again until a whole
epoch is seen), ``tensors`` (tfx: one record per batch row). The records are compared with
EXPECTED's (``btf.read_examples``) as multisets of their JSON. Needs only numpy beside the
consumer's own packages; importing this module does nothing.
"""

from __future__ import annotations

import base64
import json
import sys
import time
import traceback
from collections import Counter
from typing import Any


def plain(value: Any) -> Any:
    """Arrays, tensors, numpy scalars and bytes -> JSON-able lists, numbers and ``b64:``
    strings, the same whichever library made them."""
    if isinstance(value, bytes):
        return "b64:" + base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if type(value).__module__.startswith("tensorflow"):
        value = value.numpy()
    if hasattr(value, "tolist"):  # numpy arrays and scalars, torch tensors
        return plain(value.tolist())
    return value


def key(record: dict) -> str:
    return json.dumps(record, sort_keys=True)


# -- what each snippet made, as records ---------------------------------------------------------

def pytorch_records(ns: dict, expected: dict) -> tuple[list, list[str]]:
    loader = ns["loader"]
    notes = [f"DataLoader num_workers={loader.num_workers}"]
    kinds: Counter = Counter()
    records = []
    for example in loader:  # the snippet's loader once more
        kinds.update({f"{type(v).__module__.split('.')[0]}.{type(v).__name__}"
                      for v in example.values()})
        records.append(plain(example))
    notes.append("value types: " + ", ".join(sorted(kinds)))
    return records, notes


def _rebuild_ragged(entry: dict, parts: dict) -> Any:
    import numpy as np

    current: Any = parts[entry["value_key"]].tolist()
    for part in reversed(entry.get("partitions", [])):
        if part["type"] == "UniformRowLength":
            n = int(part["length"])
            current = [current[i:i + n] for i in range(0, len(current), n)]
        else:
            bounds = np.cumsum([0, *parts[part["key"]].tolist()]).tolist()
            current = [current[a:b] for a, b in zip(bounds, bounds[1:])]
    return current


def dali_records(ns: dict, expected: dict) -> tuple[list, list[str]]:
    import numpy as np

    features, pipe = ns["features"], ns["pipe"]
    names = list(features)
    spec = expected["features"]
    n = len(expected["records"])
    outputs = [ns["batch"]]
    seen = len(outputs[0][0])
    while seen < n:  # the snippet ran one batch; the rest of the epoch
        outputs.append(pipe.run())
        seen += len(outputs[-1][0])
    records = []
    for out in outputs:
        for i in range(len(out[0])):
            stored = {name: np.array(out[j].at(i)) for j, name in enumerate(names)}
            record = {}
            for name, entry in spec.items():
                if name in expected["skip"]:
                    continue
                if entry["type"] == "RaggedFeature":
                    record[name] = plain(_rebuild_ragged(entry, stored))
                    continue
                value = stored[name]
                if entry["dtype"] == "string":  # one string: its bytes as uint8
                    value = value.tobytes()
                elif entry["type"] == "FixedLenFeature":
                    value = value.reshape(entry["shape"])
                record[name] = plain(value)
            records.append(record)
    notes = [f"{len(outputs)} batch(es) of {len(outputs[0][0])}, first {n} samples compared"]
    return records[:n], notes


def tfx_records(ns: dict, expected: dict) -> tuple[list, list[str]]:
    import tensorflow as tf

    tensors = ns["tensors"]
    columns, kinds = {}, {}
    for name, tensor in tensors.items():
        if isinstance(tensor, tf.SparseTensor):
            columns[name] = tf.RaggedTensor.from_sparse(tensor).to_list()
        elif isinstance(tensor, tf.RaggedTensor):
            columns[name] = tensor.to_list()
        else:
            columns[name] = list(tensor.numpy())
        kinds[name] = type(tensor).__name__
    rows = {len(c) for c in columns.values()}
    assert len(rows) == 1, f"features have different batch sizes: {rows}"
    records = [{name: plain(column[i]) for name, column in columns.items()}
               for i in range(rows.pop())]
    notes = ["tensors: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))]
    return records, notes


READ = {"pytorch": pytorch_records, "dali": dali_records, "tfx": tfx_records}


def compare(got: list, want: list) -> dict:
    g, w = Counter(map(key, got)), Counter(map(key, want))
    extra, missing = g - w, w - g
    out = {"got": len(got), "expected": len(want), "duplicates": sum(
        c - 1 for k, c in g.items() if c > 1 and c > w.get(k, 0)),
        "extra": sum(extra.values()), "missing": sum(missing.values())}
    out["ok"] = not extra and not missing and len(got) == len(want) > 0
    if extra or missing:
        out["first_extra"] = next(iter(extra), None)
        out["first_missing"] = next(iter(missing), None)
    return out


def main(argv: list[str]) -> int:
    consumer, snippet, expected_path, result_path = argv
    expected = json.load(open(expected_path))
    result: dict[str, Any] = {"consumer": consumer}
    code = open(snippet).read()
    ns = {"__name__": "__main__", "__file__": snippet}
    start = time.perf_counter()
    try:
        exec(compile(code, snippet, "exec"), ns)
    except BaseException as err:  # noqa: BLE001 -- recorded, the caller decides
        result.update(ok=False, stage="snippet", error=f"{type(err).__name__}: {err}"[:2000],
                      traceback=traceback.format_exc()[-4000:])
    result["snippet_seconds"] = round(time.perf_counter() - start, 2)
    if "stage" not in result:
        start = time.perf_counter()
        try:
            got, notes = READ[consumer](ns, expected)
            want = [{k: v for k, v in r.items() if k not in expected["skip"]}
                    for r in expected["records"]]
            result.update(compare(got, want), notes=notes)
        except BaseException as err:  # noqa: BLE001
            result.update(ok=False, stage="check", error=f"{type(err).__name__}: {err}"[:2000],
                          traceback=traceback.format_exc()[-4000:])
        result["check_seconds"] = round(time.perf_counter() - start, 2)
    with open(result_path, "w") as handle:
        json.dump(result, handle, allow_nan=True)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
