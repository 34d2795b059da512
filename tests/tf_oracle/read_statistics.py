"""Parse serialized ``DatasetFeatureStatisticsList`` files with tensorflow_metadata's classes.

    <tf venv>/bin/python tests/tf_oracle/read_statistics.py --out R.json FILE...

For each FILE, R.json holds ``{"fields": ..., "reserialized": HEX}``: every set field of the
parsed message as a nested dict (field name -> value; repeated fields as lists; enums by
name; doubles and floats as ``float.hex`` strings, so nothing is lost to JSON; ints as ints),
and the message serialized again with ``deterministic=True``. Parsing fails (exit 1, the
error on stderr) when the bytes are not a valid message, e.g. a string that is not UTF-8.
Needs only tensorflow_metadata and protobuf, not TensorFlow itself.
"""

import argparse
import json
import sys


def walk(message):
    from google.protobuf.descriptor import FieldDescriptor

    out = {}
    for field, value in message.ListFields():
        values = list(value) if field.is_repeated else [value]
        items = []
        for item in values:
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                items.append(walk(item))
            elif field.type == FieldDescriptor.TYPE_ENUM:
                items.append(field.enum_type.values_by_number[item].name)
            elif field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
                items.append(float(item).hex())
            else:
                items.append(item)
        out[field.name] = items if field.is_repeated else items[0]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    from tensorflow_metadata.proto.v0 import statistics_pb2

    result = {}
    for path in args.files:
        with open(path, "rb") as f:
            data = f.read()
        message = statistics_pb2.DatasetFeatureStatisticsList()
        try:
            message.ParseFromString(data)
        except Exception as err:  # noqa: BLE001 -- any parse failure is the answer
            print(f"{path}: not a DatasetFeatureStatisticsList: {err}", file=sys.stderr)
            return 1
        result[path] = {"fields": walk(message),
                        "reserialized": message.SerializeToString(deterministic=True).hex()}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
