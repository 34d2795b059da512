"""DataflowRunner, offline: Beam translates, pickles and stages the whole build to Cloud
Storage (the emulator) and writes the job description to --template_location instead of
submitting it. Nothing runs, so nothing may be committed."""

from __future__ import annotations

import json
import pathlib
import tarfile

import pytest
from apache_beam.portability.api import beam_runner_api_pb2

from beam_tfrecords.pipelines import cli
from beam_tfrecords.sinks.commit import read_latest

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"


def test_dataflow_job_stages_offline_and_commits_nothing(gcs_emulator, tmp_path, capsys):
    prefix = gcs_emulator.unique_prefix("dataflow")
    data = f"{prefix}/input/demo.csv"
    gcs_emulator.upload(data, (ROOT / "configs" / "data" / "demo.csv").read_bytes())
    template = tmp_path / "template.json"
    args = [
        "build", "--config", str(DEMO), "--input", data, "--output", f"{prefix}/out",
        "--version", "v1",
        "--runner", "DataflowRunner", "--project", "test-project", "--region", "us-central1",
        "--temp_location", f"{prefix}/temp", "--staging_location", f"{prefix}/staging",
        "--template_location", str(template), "--setup_file", str(ROOT / "setup.py"),
    ]
    assert cli.main(args) == 0
    assert "nothing was committed" in capsys.readouterr().err

    job = json.loads(template.read_text())
    assert job["type"] == "JOB_TYPE_BATCH"
    packages = {p["name"] for p in job["environment"]["workerPools"][0]["packages"]}
    assert "workflow.tar.gz" in packages  # our package, built from setup.py for the workers
    image = job["environment"]["workerPools"][0]["workerHarnessContainerImage"]
    assert image.endswith("beam_python3.11_sdk:2.77.0")
    staged = gcs_emulator.names(f"{prefix}/staging")
    (pipeline_pb,) = [name for name in staged if name.endswith("pipeline.pb")]
    pipeline = beam_runner_api_pb2.Pipeline.FromString(
        gcs_emulator.blob(f"gs://{gcs_emulator.bucket}/{pipeline_pb}").download_as_bytes())
    labels = {t.unique_name for t in pipeline.components.transforms.values()}
    for label in ("ReadCsv", "BuildExamples", "WriteDataset/WriteShards",
                  "WriteDataset/WriteShards/WriteParts", "WriteDataset/WriteShards/FinalizeShards",
                  "WriteDataset/WriteDeadLetters", "WriteDataset/Commit"):
        assert label in labels, label
    (package,) = [name for name in staged if name.endswith("workflow.tar.gz")]
    local = tmp_path / "workflow.tar.gz"
    local.write_bytes(gcs_emulator.blob(f"gs://{gcs_emulator.bucket}/{package}")
                      .download_as_bytes())
    with tarfile.open(local) as sdist:
        names = sdist.getnames()
    assert any(n.endswith("sinks/tfrecord_sink.py") for n in names)
    assert not any("/tests/" in n for n in names)
    # The job never ran: no manifest, no LATEST, only the claimed version's marker (the
    # job's commit step needs it, should the staged job run later).
    names = gcs_emulator.names(f"{prefix}/out")
    assert [n.rsplit("/", 1)[-1] for n in names] == [".beam-tfrecords-build"], names
    assert read_latest(f"{prefix}/out") is None
