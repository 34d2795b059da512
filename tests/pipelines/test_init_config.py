"""``beam-tfrecords init`` writes a config that builds its input with zero rejects.

Run on every sample config's data, and on tables with the hard parts: nested structs, nullable
columns, lists and lists of lists, timestamps with and without time zones, dates, decimals,
dictionary-encoded strings, CSV null markers, true/false and nan cells, JSON array cells, JSON
lines whose keys come and go. Each config is parsed by the build's own loader and built; the
build must read every record and reject none. The pure inference is pinned separately.
"""

from __future__ import annotations

import datetime
import decimal
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_tfrecords.pipelines import build, cli
from beam_tfrecords.pipelines.config import load_config
from beam_tfrecords.pipelines.init_config import init_config
from beam_tfrecords.pipelines.init_inference import InitError, features_from_arrow

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = {"csv": "configs/data/people.csv", "jsonl": "configs/data/events.jsonl",
           "parquet": "configs/data/products.parquet", "avro": "configs/data/users.avro",
           "images": "configs/data/images"}


def init_and_build(tmp: Path, source: str, **kwargs) -> tuple[dict, dict]:
    text = init_config(source, output=str(tmp / "out"), **kwargs)
    path = tmp / "config.yaml"
    path.write_text(text)
    load_config(str(path))  # the build's own loader accepts it
    manifest = cli.run_build(["--config", str(path)])
    return yaml.safe_load(text), manifest


def assert_clean(manifest: dict) -> None:
    counts = manifest["counts"]
    assert counts["rejected"] == 0, manifest.get("dead_letter")
    assert counts["read"] == counts["written"] > 0
    assert counts["unread"] == {"files": 0, "bytes": 0, "rows": 0}


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
@pytest.mark.slow
def test_every_sample_input_builds_with_zero_rejects(fmt, tmp_path):
    config, manifest = init_and_build(tmp_path, str(ROOT / SAMPLES[fmt]))
    assert_clean(manifest)
    assert config["source"]["format"] == fmt
    if fmt != "images":
        assert config["splits"]["key"] == "id"


def test_parquet_with_the_hard_parts(tmp_path):
    n = 300
    utc = datetime.timezone.utc
    table = pa.table({
        "row_id": pa.array(range(n), pa.int64()),
        "when": pa.array([datetime.datetime(2024, 1, 1, tzinfo=utc)
                          + datetime.timedelta(minutes=i) for i in range(n)],
                         pa.timestamp("us", tz="UTC")),
        "local": pa.array([datetime.datetime(2024, 1, 1) + datetime.timedelta(seconds=i)
                           if i % 7 else None for i in range(n)], pa.timestamp("ns")),
        "day": pa.array([datetime.date(2020, 1, 1) + datetime.timedelta(days=i)
                         for i in range(n)], pa.date32()),
        "price": pa.array([decimal.Decimal(f"{i}.25") for i in range(n)], pa.decimal128(10, 2)),
        "carrier": pa.array([f"C{i % 5}" for i in range(n)]).dictionary_encode(),
        "maybe": pa.array([None if i % 3 == 0 else i for i in range(n)], pa.int32()),
        "counts": pa.array([list(range(i % 4)) for i in range(n)], pa.list_(pa.int64())),
        "nested": pa.array([[[i], [i, i]] if i % 2 else [] for i in range(n)],
                           pa.list_(pa.list_(pa.float64()))),
        "geo": pa.array([{"lat": i / 10, "city": None if i % 5 == 0 else f"c{i}"}
                         for i in range(n)],
                        pa.struct([("lat", pa.float64()), ("city", pa.string())])),
        "flag": pa.array([i % 2 == 0 for i in range(n)]),
        "blob": pa.array([bytes([i % 256, 0]) for i in range(n)], pa.binary()),
        "clock": pa.array([datetime.time(1, 2, 3)] * n, pa.time64("us")),
    })
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=100)
    config, manifest = init_and_build(tmp_path, str(tmp_path / "t.parquet"))
    assert_clean(manifest)
    features = config["features"]
    assert features["when"] == {"type": "int64", "unit": "us"}
    assert features["local"] == {"type": "int64", "missing": "omit", "unit": "ns"}
    assert features["day"] == {"type": "int64", "unit": "days"}
    assert features["price"] == {"type": "float"}
    assert features["carrier"] == {"type": "string"}
    assert features["maybe"] == {"type": "int64", "missing": "omit"}
    assert features["counts"] == {"type": "int64", "shape": [-1]}
    assert features["nested"] == {"type": "float", "shape": [-1, -1]}
    assert features["geo_lat"] == {"type": "float", "source": "geo.lat"}
    assert features["geo_city"] == {"type": "string", "source": "geo.city", "missing": "omit"}
    assert features["flag"] == {"type": "int64"}
    assert features["clock"] == {"type": "int64", "unit": "us"}  # since midnight
    assert config["splits"]["key"] == "row_id"
    price = next(line for line in init_config(str(tmp_path / "t.parquet")).splitlines()
                 if line.strip().startswith("price:"))
    assert "decimal -> float32; {type: int64, scale: 2} would store it exactly" in price


def test_csv_with_null_markers_bools_nan_and_json_arrays(tmp_path):
    lines = ["id,score,member,note,tags,stamp"]
    for i in range(200):
        score = "nan" if i % 11 == 0 else ("NA" if i % 13 == 0 else f"{i / 3:.4f}")
        member = "true" if i % 2 else "false"
        note = "" if i % 4 == 0 else ("NULL" if i % 9 == 0 else f"note {i}, quoted")
        tags = json.dumps([f"t{j}" for j in range(i % 3)]).replace('"', '""')
        lines.append(f'{i},{score},{member},"{note}","{tags}",2024-01-0{i % 9 + 1}T10:00:00')
    (tmp_path / "in.csv").write_text("\n".join(lines) + "\n")
    config, manifest = init_and_build(tmp_path, str(tmp_path / "in.csv"))
    assert_clean(manifest)
    assert config["source"]["csv"]["null_values"] == ["", "NA", "NULL"]
    features = config["features"]
    assert features["score"] == {"type": "float", "missing": "omit"}
    assert features["member"] == {"type": "int64"}
    assert features["tags"] == {"type": "string", "shape": [-1]}
    # ISO-8601 text in every sampled cell: epoch integers, as the reader parses it
    assert features["stamp"] == {"type": "int64", "unit": "s"}


def test_date_text_gets_a_unit_only_when_every_sampled_value_is_iso(tmp_path):
    rows = []
    for i in range(120):
        rows.append({"id": i, "day": f"2024-01-{i % 28 + 1:02d}",
                     "at": f"2024-01-01T10:00:{i % 60:02d}.{i:03d}+02:00",
                     "fine": f"2024-01-01 10:00:00.{i:09d}",
                     "old": f"{1500 + i}-01-01T00:00:00.123456789",  # before 1677: not ns
                     "mixed": "2024-01-01" if i % 2 else "soon",
                     "local": f"{i % 28 + 1:02d}/01/2024"})
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config, manifest = init_and_build(tmp_path, str(tmp_path / "in.jsonl"))
    assert_clean(manifest)
    features = config["features"]
    assert features["day"] == {"type": "int64", "unit": "days"}
    assert features["at"] == {"type": "int64", "unit": "ms"}
    assert features["fine"] == {"type": "int64", "unit": "ns"}
    assert features["old"] == {"type": "int64", "unit": "us"}
    assert features["mixed"] == {"type": "string"}
    assert features["local"] == {"type": "string"}  # a layout init does not guess


def test_jsonl_keys_that_come_and_go(tmp_path):
    rows = []
    for i in range(150):
        row = {"event_id": f"e{i}", "n": i, "x": {"y": i * 1.5}}
        if i % 3:
            row["opt"] = None if i % 2 else [i, i]
        rows.append(row)
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config, manifest = init_and_build(tmp_path, str(tmp_path / "in.jsonl"))
    assert_clean(manifest)
    assert config["features"]["opt"] == {"type": "int64", "shape": [-1], "missing": "omit"}
    assert config["features"]["x_y"] == {"type": "float", "source": "x.y"}
    assert config["splits"]["key"] == "event_id"


def test_no_id_like_column_means_no_split(tmp_path):
    (tmp_path / "in.csv").write_text("a,b\n1,2\n1,3\n")
    text = init_config(str(tmp_path / "in.csv"))
    assert "splits" not in yaml.safe_load(text) and "every record goes to 'train'" in text


def test_schema_inference_is_pure():
    schema = pa.schema([("m", pa.map_(pa.string(), pa.int64())),
                        ("rows", pa.list_(pa.struct([("a", pa.int64())]))),
                        ("big", pa.uint64()), ("fixed", pa.list_(pa.int64(), 3))])
    columns = {c.name: c for c in features_from_arrow(pa, schema, {})}
    assert columns["m"].skip and columns["rows"].skip
    assert columns["big"].dtype == "int64" and "2**63-1" in columns["big"].note
    assert columns["fixed"].shape == (-1,)


@pytest.mark.slow
def test_the_command_prints_the_config(tmp_path):
    done = subprocess.run([sys.executable, "-m", "beam_tfrecords.pipelines.cli", "init",
                           "--input", str(ROOT / SAMPLES["parquet"])],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["name"] == "products"
    missing = subprocess.run([sys.executable, "-m", "beam_tfrecords.pipelines.cli", "init",
                              "--input", str(tmp_path / "nothing*.csv")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and missing.stderr.count("\n") == 1
    assert "no input matches" in missing.stderr


def test_numbers_arrow_reads_but_our_csv_reader_does_not_stay_text(tmp_path):
    # Found on numpy's own validation tables (numpy/_core/tests/data/*.csv): Arrow infers
    # hex cells such as 0x80000000 as int64, which our CSV reader refuses.
    (tmp_path / "in.csv").write_text(
        "kind,bits,tol,ratio\n" + "".join(f"f32,0x{i:08x},{i % 4},{i}e-1\n" for i in range(50)))
    config, manifest = init_and_build(tmp_path, str(tmp_path / "in.csv"))
    assert_clean(manifest)
    assert config["features"]["bits"] == {"type": "string"}
    assert config["features"]["tol"] == {"type": "int64"}
    assert config["features"]["ratio"] == {"type": "float"}


def test_a_table_nobody_here_wrote(tmp_path):
    import numpy

    table = Path(numpy.__file__).parent / "_core" / "tests" / "data"
    found = sorted(table.glob("umath-validation-set-*.csv"))
    assert found, "numpy ships its validation tables in this pinned version"
    _, manifest = init_and_build(tmp_path, str(found[0]))
    assert_clean(manifest)


_CELLS = st.one_of(
    st.text(alphabet="0123456789+-.eEnaiftyrulsxTRUEFALS \t\u0663", max_size=10),
    st.sampled_from(["true", "FALSE", "-nan", "+inf", "1e400", "-0", "007", "0x1f", "1_0",
                     "9223372036854775807", "9223372036854775808", "-9223372036854775809",
                     "1.", ".5", "517.0", "1e3", " 12 ", "1e19", "\u0663", "+5"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_CELLS, min_size=1, max_size=25), st.sampled_from(["int64", "float"]))
def test_the_sampled_cells_check_is_the_readers_cell_by_cell_answer(cells, dtype):
    """init keeps a number type only where our CSV reader parses every sampled cell; checked
    column-wise (csv_typing.type_batch) it must answer as parse_cell cell by cell does."""
    from beam_tfrecords.pipelines.init_config import _reader_parses_all
    from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
    from beam_tfrecords.transforms.readers.read_csv import CellError, parse_cell

    spec = FeatureSpec("c", dtype)
    try:
        for cell in cells:
            parse_cell(spec, cell)
        expected = True
    except CellError:
        expected = False
    assert _reader_parses_all(spec, pa.array(cells, pa.string())) == expected


def test_a_float_column_written_with_fixed_decimal_places_is_pointed_at_scale(tmp_path):
    rows = ["id,price,ratio,big", *(f"{i},{i * 7 % 1000}.{i % 100:02d},{i / 7},{i}.5e3"
                                    for i in range(300))]
    (tmp_path / "in.csv").write_text("\n".join(rows) + "\n")
    text = init_config(str(tmp_path / "in.csv"))
    price = next(line for line in text.splitlines() if line.strip().startswith("price:"))
    assert "{type: float}" in price
    assert "every sampled value has 2 decimal places: {type: int64, scale: 2}" in price
    for other in ("ratio:", "big:"):  # varying places; an exponent
        line = next(line for line in text.splitlines() if line.strip().startswith(other))
        assert "scale" not in line, line
    # The suggestion holds: the config with it builds every row, exactly.
    config = yaml.safe_load(text)
    config["features"]["price"] = {"type": "int64", "scale": 2}
    config["output"]["path"] = str(tmp_path / "out")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    manifest = cli.run_build(["--config", str(tmp_path / "c.yaml"), "--version", "v"])
    assert manifest["counts"]["written"] == 300 and manifest["counts"]["rejected"] == 0


def _uids_stored(tmp_path: Path, name: str) -> dict[int, bytes]:
    """Build the file ``name`` from init's config (no rejects, ``uid`` typed string) and
    return each record's stored ``uid`` by its ``id``."""
    from beam_tfrecords_tests_helpers import read_examples, shard_paths

    config, manifest = init_and_build(tmp_path, str(tmp_path / name))
    assert_clean(manifest)
    assert config["features"]["uid"] == {"type": "string"}
    version = tmp_path / "out" / manifest["version"]
    return {example["id"][1][0]: example["uid"][1][0]
            for path in shard_paths(version, manifest) for example in read_examples(path)}


def test_avro_logical_types_from_another_writer(tmp_path):
    """fastavro's uuid, decimal (bytes and fixed), date, time-micros, timestamp-micros and
    local-timestamp-millis, an enum and a map: init's config builds every record, and a UUID
    is stored as its canonical text."""
    import uuid

    import fastavro

    schema = {"type": "record", "name": "T", "fields": [
        {"name": "id", "type": "long"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                   "scale": 2}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "clock", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "local", "type": ["null", {"type": "long",
                                            "logicalType": "local-timestamp-millis"}]},
        {"name": "weight", "type": {"type": "fixed", "name": "W", "size": 8,
                                    "logicalType": "decimal", "precision": 12, "scale": 3}},
        {"name": "color", "type": {"type": "enum", "name": "C", "symbols": ["RED", "GREEN"]}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
    ]}
    utc = datetime.timezone.utc
    rows = [{"id": i, "price": decimal.Decimal(f"{i}.25"), "uid": str(uuid.UUID(int=i * 977)),
             "day": datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 30),
             "clock": datetime.time(1, 2, 3, i), "ts": datetime.datetime(2024, 1, 1, tzinfo=utc)
             + datetime.timedelta(seconds=i), "local": None if i % 5 == 0 else
             datetime.datetime(2024, 1, 1) + datetime.timedelta(milliseconds=i),
             "weight": decimal.Decimal(f"{i}.125"), "color": "RED" if i % 2 else "GREEN",
             "attrs": {"a": i}} for i in range(200)]
    with open(tmp_path / "t.avro", "wb") as handle:
        fastavro.writer(handle, fastavro.parse_schema(schema), rows, codec="deflate")
    assert _uids_stored(tmp_path, "t.avro") == {i: str(uuid.UUID(int=i * 977)).encode()
                                               for i in range(200)}


def test_a_parquet_uuid_column_is_its_canonical_text(tmp_path):
    import uuid

    ids = [uuid.UUID(int=i * 7919) for i in range(50)]
    column = pa.ExtensionArray.from_storage(pa.uuid(), pa.array([u.bytes for u in ids],
                                                                pa.binary(16)))
    pq.write_table(pa.table({"id": pa.array(range(50)), "uid": column}), tmp_path / "u.parquet")
    assert _uids_stored(tmp_path, "u.parquet") == {i: str(u).encode() for i, u in enumerate(ids)}


def test_files_pandas_writes_with_its_defaults(tmp_path):
    """DataFrame.to_csv writes its index under an empty header, to_json(lines=True) epoch
    milliseconds, to_parquet a time zone, categories and nullable integers: init's config
    builds each with no rejects, and the unnamed index is a comment, not a failure."""
    import pandas as pd

    n = 120
    frame = pd.DataFrame({
        "a": range(n),
        "when": pd.date_range("2024-01-01", periods=n, freq="h", tz="Europe/Paris"),
        "cat": pd.Categorical(["x", "y", "z"] * (n // 3)),
        "f": [None if i % 7 == 0 else i / 4 for i in range(n)],
        "n": pd.array([None if i % 3 == 0 else i for i in range(n)], dtype="Int64")})
    frame.index = frame.index * 2
    frame.to_csv(tmp_path / "t.csv")
    frame.to_json(tmp_path / "t.jsonl", orient="records", lines=True)
    frame.to_parquet(tmp_path / "t.parquet")
    for name in ("t.csv", "t.jsonl", "t.parquet"):
        folder = tmp_path / name.replace(".", "_")
        folder.mkdir()
        config, manifest = init_and_build(folder, str(tmp_path / name))
        assert_clean(manifest)
        assert set(config["features"]) == {"a", "when", "cat", "f", "n"}, name
    text = init_config(str(tmp_path / "t.csv"))
    assert "  # '': not a feature: no name in the header (as pandas writes its index)" in text


def test_parquet_int96_timestamps_half_floats_and_uint64_past_int64(tmp_path):
    """Spark-style INT96 timestamps carry no null count in their statistics (counted from
    the data instead, not assumed missing); a uint64 column holding values past 2**63-1 is
    a comment, since the config's build would refuse every such row; float16 is a float."""
    n = 100
    table = pa.table({
        "id": pa.array(range(n)),
        "ts": pa.array([datetime.datetime(2024, 1, 1) + datetime.timedelta(seconds=i)
                        for i in range(n)], pa.timestamp("ns")),
        "small": pa.array(range(n), pa.uint64()),
        "big": pa.array([2**64 - 1 - i for i in range(n)], pa.uint64()),
        "h": pa.array([i / 2 for i in range(n)], pa.float16()),
    })
    pq.write_table(table, tmp_path / "s.parquet", use_deprecated_int96_timestamps=True)
    stats = pq.ParquetFile(tmp_path / "s.parquet").metadata.row_group(0).column(1).statistics
    assert stats is None or not stats.has_null_count  # what makes this case: INT96's stats
    config, manifest = init_and_build(tmp_path, str(tmp_path / "s.parquet"))
    assert_clean(manifest)
    assert config["features"]["ts"] == {"type": "int64", "unit": "ns"}  # not missing: omit
    assert config["features"]["small"] == {"type": "int64"}
    assert config["features"]["h"] == {"type": "float"}
    assert "big" not in config["features"]
    text = init_config(str(tmp_path / "s.parquet"))
    assert "# big: not a feature: uint64 values up to 18446744073709551615" in text


def test_a_jsonl_field_arrow_cannot_type_is_a_comment_and_the_rest_is_inferred(tmp_path):
    """One field of integers past 64 bits, or of numbers in some lines and text in others,
    made init refuse the whole file; now that field is a comment saying why."""
    lines = [json.dumps({"id": i, "big": 2**64 - 1 - i, "huge": 10**30 if i == 5 else i,
                         "either": i if i % 2 else f"t{i}", "score": i / 4, "ok": i % 2 == 0})
             for i in range(60)]
    (tmp_path / "t.jsonl").write_text("\n".join(lines) + "\n")
    config, manifest = init_and_build(tmp_path, str(tmp_path / "t.jsonl"))
    assert_clean(manifest)
    assert config["features"] == {"id": {"type": "int64"}, "score": {"type": "float"},
                                  "ok": {"type": "int64"}}
    text = init_config(str(tmp_path / "t.jsonl"))
    assert (f"# big: not a feature: integers from {2**64 - 60} to {2**64 - 1}, past int64's "
            "range") in text
    assert f"# huge: not a feature: integers from 0 to {10**30}, past int64's range" in text
    assert ("# either: not a feature: no one type holds every sampled value (int, str): "
            "int64 refuses 't0'") in text
    (tmp_path / "bad.jsonl").write_text('{"x": 1}\n{"x": "a"}\n')
    with pytest.raises(InitError, match="no field of the sampled records has one type"):
        init_config(str(tmp_path / "bad.jsonl"))


@pytest.mark.parametrize("text,expected", [
    ("id,name\n1,a\n2,b\n", ","),
    ("id\tname\tscore\n1\ta\t1.5\n", "\t"),
    ("id;name;score\n1;a;1,5\n2;b;2,5\n", ";"),  # European: the comma is the decimal mark
    ("a|b\n1|2\n", "|"),
    ('id,note\n1,"x;y;z"\n2,"p;q;r"\n', ","),  # separators inside quotes do not count
    ("only\n1\n2\n", ","),  # one column: the default
    ("a;b\n1;2;3\n", ","),  # uneven: no separator splits every line alike
    ("a\tb\n1\t2\n3\t", "\t"),  # the sample's last line may be cut short
])
def test_sniff_delimiter(text, expected):
    from beam_tfrecords.pipelines.init_config import sniff_delimiter

    assert sniff_delimiter(text) == expected


def test_a_tab_or_semicolon_separated_file_builds_without_naming_its_separator(tmp_path):
    rows = [f"{i}\tname {i}\t{i / 2}" for i in range(50)]
    (tmp_path / "t.tsv").write_text("id\tname\tscore\n" + "\n".join(rows) + "\n")
    config, manifest = init_and_build(tmp_path, str(tmp_path / "t.tsv"))
    assert_clean(manifest)
    assert config["source"]["csv"]["delimiter"] == "\t"
    assert set(config["features"]) == {"id", "name", "score"}
    (tmp_path / "eu.csv").write_text("id;price\n1;1,50\n2;2,25\n")
    text = init_config(str(tmp_path / "eu.csv"))
    assert 'delimiter: ";"' in text and "numbers written with a decimal comma (1,5)" in text


def test_utf16_and_gzip_input_is_named_at_init_and_at_launch(tmp_path):
    (tmp_path / "u.csv").write_bytes("id,name\n1,é\n".encode("utf-16"))
    with pytest.raises(InitError, match=r"u.csv: the file is UTF-16 text \(little-endian byte "
                                         r"order mark FF FE\).*iconv -f UTF-16 -t UTF-8"):
        init_config(str(tmp_path / "u.csv"))
    config = tmp_path / "c.yaml"
    config.write_text(f"name: u\nsource: {{format: csv, path: {tmp_path / 'u.csv'}}}\n"
                      f"features: {{id: {{type: int64}}}}\noutput: {{path: {tmp_path / 'o'}}}\n")
    with pytest.raises(build.BuildError, match="the file is UTF-16 text"):
        cli.run_build(["--config", str(config)])
    import gzip

    (tmp_path / "u.csv").write_bytes(gzip.compress(b"id,name\n1,a\n"))
    with pytest.raises(InitError, match="the file is gzip-compressed; .* e.g. gunzip"):
        init_config(str(tmp_path / "u.csv"))
    with pytest.raises(build.BuildError, match="the file is gzip-compressed"):
        cli.run_build(["--config", str(config)])
