"""The launch protocol (sinks/commit.py ``begin_build``/``start_build``, the sink's
``InitializeWrite`` step): the output's lease and the version's claim happen when the pipeline
runs, never while it is built, and the running job keeps the lease wherever it runs.

- A pipeline built with ``WriteTFRecordDataset`` and never run -- a template, a dry test --
  writes nothing into the output: no lease, no version folder, not even the root.
- A job submitted to a job service in another process, by a launcher that exits at once,
  keeps the lease from its own bundles through many of the lease's lifetimes: no other build
  can take it meanwhile, and the job commits.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time

import apache_beam as beam
import pytest
from beam_tfrecords_tests_helpers import job_service_and_pool

import beam_tfrecords as btf
from beam_tfrecords.sinks.lease import TTL_ENV, JobLease, Lease, LeaseHeld, LeaseLost, current

FEATURES = {"id": {"type": "int64"}, "name": {"type": "string"}}


def _tree(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_pipeline_built_and_never_run_writes_nothing(tmp_path):
    fresh, used = tmp_path / "fresh", tmp_path / "used"
    p = beam.Pipeline()
    _ = (p | "Rows" >> beam.Create([{"id": 1, "name": "a"}])
         | "WriteRows" >> btf.WriteTFRecordDataset(output=str(fresh), name="ds",
                                                   features=FEATURES))
    p.to_runner_api()  # translated, as a template launcher does, and still not run
    assert not fresh.exists()

    first = beam.Pipeline()
    _ = (first | beam.Create([b"a", b"b"]).with_output_types(bytes)
         | btf.WriteTFRecordDataset(output=str(used), name="ds", version="v1"))
    first.run().wait_until_finish()
    before = _tree(used)
    assert "v1/manifest.json" in before and ".lease" not in before
    p = beam.Pipeline()
    _ = (p | beam.Create([b"c"]).with_output_types(bytes)
         | btf.WriteTFRecordDataset(output=str(used), name="ds", version="v2"))
    assert _tree(used) == before  # no lease taken, no v2 claimed
    assert current(str(used)) is None


class _Bundle:
    """Stands for a writing step whose bundle runs (JobLease holds it weakly)."""


def test_a_jobs_bundles_keep_its_lease_and_a_lost_lease_fails_the_next_bundle(tmp_path):
    root, ttl = str(tmp_path), 0.3
    Lease(root, "a" * 32, ttl=ttl, job=True).acquire()  # the job's first step took it
    job, rival, bundle = JobLease(root, "a" * 32, ttl), Lease(root, "b" * 32, ttl=ttl), _Bundle()
    job.begin(bundle)
    time.sleep(3 * ttl)  # three lifetimes while the bundle runs: renewed from its thread
    with pytest.raises(LeaseHeld):
        rival.acquire()
    job.end(bundle)
    time.sleep(2 * ttl)  # no bundle runs: nothing renews it, and it expires
    assert rival.acquire() is not None  # taken over from the job
    with pytest.raises(LeaseLost, match="lost the lease to build bbbbbbbb"):
        job.begin(_Bundle())


_HAND_OVER = textwrap.dedent("""
    import sys
    from beam_tfrecords.sinks.commit import start_build

    root, hand_over = sys.argv[1], sys.argv[2] == "yes"
    with start_build(root, "v1", "c" * 32) as build:
        if hand_over:
            build.hand_over()  # the job it submitted runs on; this process exits
        import os
        os._exit(0)  # gone without releasing anything, as a killed launcher
""")


def _launch(preforked, code: str, argv: list[str], env=None) -> tuple[int, str, str]:
    """Run a launcher to its exit: (exit status, stdout, stderr). Forked from a server that
    imported Beam once (the ``preforked`` fixture), each is a process of its own that exits,
    which is what these tests need of a launcher."""
    launcher = preforked.start(code, argv, cwd=os.getcwd(), env=env)
    launcher.wait(timeout=120)
    return launcher.returncode, launcher.stdout.read(), launcher.stderr.read()


@pytest.mark.parametrize("hand_over", [True, False], ids=["handed-over", "not-handed-over"])
def test_a_launcher_that_exits_leaves_the_lease_to_its_job_only_when_it_handed_it_over(
        preforked, tmp_path, hand_over):
    root = str(tmp_path / "out")
    code, _, err = _launch(preforked, _HAND_OVER, [root, "yes" if hand_over else "no"])
    assert code == 0, err[-2000:]  # and the launcher is gone, reaped
    assert (tmp_path / "out" / "v1").is_dir()  # claimed
    rival = Lease(root, "d" * 32)
    if hand_over:  # held for the job, in no process's name: the launcher's exit frees nothing
        with pytest.raises(LeaseHeld):
            rival.acquire()
        assert current(root).pid == 0
    else:  # a launcher's own lease frees as its process goes
        assert rival.acquire() is not None


# -- a job that outlives its launcher ---------------------------------------------------------

TTL = 3.0  # seconds: the job below lasts about five of them
ROWS, SECONDS_PER_ROW = 30, 0.5

_LAUNCHER = textwrap.dedent("""
    import sys, time
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    import beam_tfrecords as btf

    job, pool, out, rows, pause = sys.argv[1:6]

    def slow(i):
        time.sleep(float(pause))  # a job that lasts several lease lifetimes
        return b"record-%05d" % i

    p = beam.Pipeline(options=PipelineOptions([
        "--runner=PortableRunner", f"--job_endpoint=localhost:{job}",
        "--environment_type=EXTERNAL", f"--environment_config=localhost:{pool}"]))
    _ = (p | beam.Create(list(range(int(rows))))
         | beam.Map(slow).with_output_types(bytes)
         | btf.WriteTFRecordDataset(output=out, name="slow", version="v1"))
    result = p.run()  # submitted; wait_until_finish is never called
    print("submitted", result.state, flush=True)
""")


@pytest.fixture
def job_service(tmp_path):
    """A Beam job service and an SDK worker pool, each its own process (group): the job runs
    there, not in the process that submits it."""
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep
               + os.environ.get("PATH", ""))
    env.pop(TTL_ENV, None)  # the TTL travels in the job, from its launcher
    with job_service_and_pool(tmp_path, env) as (job, pool):
        yield job, pool, env


@pytest.mark.slow
@pytest.mark.e2e
def test_a_job_whose_launcher_exited_keeps_the_lease_through_many_lifetimes_and_commits(
        preforked, tmp_path, job_service):
    job, pool, env = job_service
    out = tmp_path / "out"
    code, said, err = _launch(preforked, _LAUNCHER, [str(job), str(pool), str(out), str(ROWS),
                                                      str(SECONDS_PER_ROW)],
                              env=dict(env, **{TTL_ENV: str(TTL)}))
    assert code == 0, err[-2000:]
    assert "submitted" in said  # and the launcher is gone

    manifest = out / "v1" / "manifest.json"
    rival = Lease(str(out), "f" * 32, ttl=TTL)
    deadline = time.monotonic() + 240
    while current(str(out)) is None and not manifest.exists():  # the job's first step
        assert time.monotonic() < deadline, "the job never took the lease"
        time.sleep(0.1)
    held_since, refused = time.monotonic(), 0
    while not manifest.exists():
        assert time.monotonic() < deadline, "the job never committed"
        try:
            rival.acquire()
        except LeaseHeld:
            refused += 1
        else:
            rival.release()
            if manifest.exists():  # the commit released it between the two looks
                break
            pytest.fail(f"another build took the lease {time.monotonic() - held_since:.1f} s "
                        "into the job")
        time.sleep(0.25)
    held = time.monotonic() - held_since
    assert held > 3 * TTL and refused > 10, (held, refused)
    document = json.loads(manifest.read_text())
    assert document["counts"]["written"] == ROWS
    assert (out / "LATEST").read_text().strip() == "v1"
    assert current(str(out)) is None  # the commit released it
