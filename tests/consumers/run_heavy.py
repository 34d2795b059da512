"""README's PyTorch, DALI and TFX snippets, run unchanged on every sample config, each in its own
environment; the results, with the versions that gave them, go to tests/consumers/RESULTS.md.

    .venv/bin/python tests/consumers/run_heavy.py [--consumers pytorch,dali,tfx]
        [--configs demo,csv,...] [--setup-only] [--keep DIR]

The test suite runs the light consumers (tf.data, TFDS, Ray, Beam:
tests/consumers/test_tfds_ray_loaders.py);
these three need installs of gigabytes and minutes, so they run here, by hand. Steps:

1. environments, made once under ``.venv-consumers/<name>/`` (gitignored) and reused after:
   ``pytorch`` -- torch (a ``+cpu`` build when the configured package index serves one, else
   whatever ``pip install torch`` resolves; RESULTS.md says which), numpy and this package,
   editable (with its dependencies: the reader imports Beam);
   ``dali`` -- ``nvidia-dali-cuda120`` and numpy (DALI runs CPU-only pipelines without a GPU);
   ``tfx`` -- bench/.venv-tfxbsl when it exists, else ``.venv-consumers/tfx`` with bench/run.py's
   ``TFXBSL_REQUIREMENTS`` (tfx-bsl brings TensorFlow and tensorflow-metadata along);
   each records how it was made in its ``made.json``; a failed pip install is an error that
   RESULTS.md quotes;
2. every sample config whose input ships with the repository built with this interpreter into a
   temporary folder, once as configured and once with ``output.index: true`` (DALI reads
   only through index files);
3. the expected values: ``btf.read_examples(<version>, split="train")`` dumped as JSON (arrays
   as lists, bytes as base64), and per config the features each consumer cannot hold by what
   README states (DALI: a feature some records leave out, lists of strings);
4. each snippet, exactly as README prints it, run by tests/consumers/harness.py with that
   environment's interpreter in a folder where ``output/demo`` links to the data set root; the
   harness execs it and compares what it made with the expected records, as multisets.

A consumer that cannot read a config for a reason README states is "not supported (reason)",
not a failure. Exit status 1 when anything FAILs (or an environment cannot be made), else 0.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
ENVS = ROOT / ".venv-consumers"
HARNESS = HERE / "harness.py"
RESULTS = HERE / "RESULTS.md"
CONSUMERS = ("pytorch", "dali", "tfx")
# Same pattern as tests/consumers/test_tfds_ray_loaders.py.
SNIPPET = re.compile(r"<!-- consumer: ([\w.-]+) -->\n```python\n(.*?)^```", re.S | re.M)
PIP_TIMEOUT = 1800  # seconds for one pip install (torch and tfx-bsl are hundreds of MB)
RUN_TIMEOUT = 900  # seconds for one snippet run
DALI_REQUIREMENTS = ("nvidia-dali-cuda120", "numpy")
# Besides the sample configs, {name: (config, {section: entries replaced})}: demo in shards of
# ~100 kB, so that the train split has several shards and the two DataLoader workers each get
# some; jsonl with a number feature that `missing: omit` leaves out of some records (which
# README says DALI cannot read).
VARIANTS = {
    "demo-small-shards": ("demo", {"output": {"shard_size": {"target": "100KB"}}}),
    "jsonl-omit-number": ("jsonl", {"features": {
        "user_age": {"type": "int64", "source": "user.age", "missing": "omit"}}}),
}


def _tfxbsl_requirements() -> tuple[str, ...]:
    """bench/run.py's ``TFXBSL_REQUIREMENTS``, read from its source (importing bench/run.py
    would import the benchmark's modules)."""
    tree = ast.parse((ROOT / "bench" / "run.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "TFXBSL_REQUIREMENTS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise RuntimeError("bench/run.py has no TFXBSL_REQUIREMENTS")


# -- environments -------------------------------------------------------------------------------

class EnvError(RuntimeError):
    """An environment that could not be made; the message carries pip's error lines."""


def _pip_errors(done: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.startswith("ERROR")]
    return " | ".join(lines) or (done.stderr or done.stdout)[-1500:].strip()


def _pip(python: pathlib.Path, *args: str, log: list[str]) -> subprocess.CompletedProcess:
    command = ["nice", "-n", "10", str(python), "-m", "pip", "install", "-q", *args]
    log.append("pip install " + " ".join(args))
    print("  $", " ".join(command[3:]), flush=True)
    return subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT)


def _new_venv(path: pathlib.Path) -> pathlib.Path:
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return python


def _imports(python: pathlib.Path, module: str) -> bool:
    return python.exists() and subprocess.run(
        [str(python), "-c", f"import {module}"], capture_output=True).returncode == 0


def _torch_candidates(python: pathlib.Path) -> list[tuple[str, str]]:
    """(requirement, what it is) to try in order: the CPU builds (``+cpu``) the configured
    index serves, newest first, then plain ``torch``."""
    done = subprocess.run([str(python), "-m", "pip", "index", "versions", "torch"],
                          capture_output=True, text=True, timeout=300)
    found = re.search(r"^Available versions: (.*)$", done.stdout, re.M)
    versions = [v.strip() for v in found[1].split(",")] if found else []
    cpu = [(f"torch=={v}", f"CPU build {v}, served by the configured package index")
           for v in versions if v.endswith("+cpu")]
    return [*cpu, ("torch", "no CPU build installed from the configured package index: "
                            "`pip install torch` as it resolves (a CUDA build)")]


def _made(env: pathlib.Path) -> dict:
    """What made.json says about how and when ``env`` was made ({} when it was made by
    hand)."""
    try:
        return json.loads((env / "made.json").read_text())
    except (OSError, ValueError):
        return {}


def _install(env: pathlib.Path, python: pathlib.Path, requirements: Sequence[str],
             note: str, log: list[str]) -> subprocess.CompletedProcess:
    start = time.perf_counter()
    done = _pip(python, *requirements, log=log)
    if done.returncode == 0:
        (env / "made.json").write_text(json.dumps({
            "date": f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
            "seconds": round(time.perf_counter() - start), "pip install": list(requirements),
            "note": note}, indent=1) + "\n")
    return done


def setup_pytorch(log: list[str]) -> pathlib.Path:
    env = ENVS / "pytorch"
    python = _new_venv(env)
    if _imports(python, "torch") and _imports(python, "beam_tfrecords.pipelines.read"):
        return python
    errors = []
    for requirement, what in _torch_candidates(python):
        # The package itself, editable: the snippet imports beam_tfrecords (and with it Beam).
        done = _install(env, python, (requirement, "numpy", "-e", str(ROOT)), what, log)
        if done.returncode == 0:
            return python
        errors.append(f"`{requirement}`: {_pip_errors(done)}")
    raise EnvError("torch could not be installed: " + "; ".join(errors))


def setup_dali(log: list[str]) -> pathlib.Path:
    env = ENVS / "dali"
    python = _new_venv(env)
    if _imports(python, "nvidia.dali") and _imports(python, "numpy"):
        return python
    # The snippet and the harness need no beam_tfrecords: DALI and numpy are enough.
    done = _install(env, python, DALI_REQUIREMENTS, "", log)
    if done.returncode != 0:
        raise EnvError("nvidia-dali-cuda120 could not be installed: " + _pip_errors(done))
    return python


def setup_tfx(log: list[str]) -> pathlib.Path:
    bench = ROOT / "bench" / ".venv-tfxbsl" / "bin" / "python"
    if _imports(bench, "tfx_bsl"):
        return bench
    env = ENVS / "tfx"
    python = _new_venv(env)
    if _imports(python, "tfx_bsl"):
        return python
    # bench/run.py's pins; tfx-bsl brings TensorFlow, tensorflow-metadata and numpy along.
    done = _install(env, python, _tfxbsl_requirements(), "", log)
    if done.returncode != 0:
        raise EnvError("tfx-bsl could not be installed: " + _pip_errors(done))
    return python


SETUP = {"pytorch": setup_pytorch, "dali": setup_dali, "tfx": setup_tfx}


# -- data sets and what each consumer should see ------------------------------------------------

def local_configs() -> list[str]:
    """The sample configs whose input ships with the repository (as
    tests/consumers/test_tfds_ray_loaders.py),
    then VARIANTS."""
    from beam_tfrecords.pipelines.config import load_config

    return sorted(p.stem for p in (ROOT / "configs").glob("*.yaml")
                  if (ROOT / load_config(str(p)).source.path).exists()) + sorted(VARIANTS)


def build(name: str, out: pathlib.Path, *, index: bool) -> pathlib.Path:
    """Build configs/<name>.yaml (or a VARIANTS entry) into ``out`` as version v1, as
    configured or, with ``index``, from a copy with ``output.index: true``; the data set
    root."""
    import yaml

    from beam_tfrecords.pipelines import build as build_cli
    from beam_tfrecords.pipelines.config import load_config

    base, changes = VARIANTS.get(name, (name, {}))
    config = ROOT / "configs" / f"{base}.yaml"
    source = str(ROOT / load_config(str(config)).source.path)
    if index:
        changes = {**changes, "output": {**changes.get("output", {}), "index": True,
                                         "compression": "none"}}
    if changes:
        raw = yaml.safe_load(config.read_text())
        raw["source"]["path"] = source
        for section, entries in changes.items():
            raw[section] = {**raw[section], **entries}
        out.parent.mkdir(parents=True, exist_ok=True)
        config = out.parent / f"{name}{'-indexed' if index else ''}.yaml"
        config.write_text(yaml.safe_dump(raw))
    build_cli.run(["--config", str(config), "--input", source, "--output", str(out),
                   "--version", "v1"])
    return out


def _stored_keys(name: str, entry: dict) -> list[str]:
    if entry["type"] == "RaggedFeature":
        return [entry["value_key"], *(p["key"] for p in entry.get("partitions", [])
                                      if p["type"] == "RowLengths")]
    return [name]


def dali_cannot(spec: dict, raw_keys: list[set]) -> dict[str, str]:
    """{feature: why} for the features DALI cannot hold, in README's own words: lists of
    strings (README's snippet leaves them out) and features some records leave out
    (``missing: omit``: DALI stops on the first record without one)."""
    why = {}
    for name, entry in spec["features"].items():
        reasons = []
        if entry["dtype"] == "string" and (entry["type"] != "FixedLenFeature"
                                           or list(entry.get("shape", [])) != []):
            reasons.append("a list of strings")
        if any(k not in keys for keys in raw_keys for k in _stored_keys(name, entry)):
            reasons.append("left out of some records (`missing: omit`)")
        if reasons:
            why[name] = " and ".join(reasons)
    if spec.get("example_type") == "SequenceExample":
        why["*"] = "SequenceExamples"
    return why


def expected_values(root: pathlib.Path, path: pathlib.Path) -> dict:
    """The train split as ``btf.read_examples`` reads it, plus what DALI cannot hold; written
    to ``path`` as JSON."""
    import beam_tfrecords as btf
    from beam_tfrecords.pipelines.read import resolve_version, shard_files
    from beam_tfrecords.runtime import storage
    from beam_tfrecords.sinks.format import tfrecord_format as tff
    from beam_tfrecords.transforms.codec import wire

    harness = _harness_module()
    version = resolve_version(str(root))
    files, compression, spec = shard_files(version, "train")
    raw_keys = []
    if spec.get("example_type", "Example") == "Example":
        for file in files:
            with storage.open_read(file) as handle:
                raw_keys += [set(wire.decode_example(r))
                             for r in tff.iter_records(handle, compression, path=file)]
    records = [harness.plain(r) for r in btf.read_examples(str(root), split="train")]
    doc = {"version": version, "shards": len(files), "features": spec["features"],
           "records": records, "dali_cannot": dali_cannot(spec, raw_keys)}
    path.write_text(json.dumps(doc))
    return doc


def _harness_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("consumers_harness", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


READING = "docs/reading.md"  # where the consumer snippets live (README.md links to it)


def readme_snippets() -> dict[str, str]:
    return dict(SNIPPET.findall((ROOT / READING).read_text()))


# -- one run ------------------------------------------------------------------------------------

def run_one(consumer: str, python: pathlib.Path, code: str, root: pathlib.Path,
            expected: dict, folder: pathlib.Path) -> dict:
    """The snippet in ``folder`` (``output/demo`` -> root) under the harness; its verdict."""
    (folder / "output").mkdir(parents=True)
    (folder / "output" / "demo").symlink_to(root)
    (folder / "snippet.py").write_text(code)
    skip = expected["dali_cannot"] if consumer == "dali" else {}
    doc = {k: expected[k] for k in ("features", "records")} | {"skip": skip}
    (folder / "expected.json").write_text(json.dumps(doc))
    start = time.perf_counter()
    try:
        done = subprocess.run(
            ["nice", "-n", "10", str(python), str(HARNESS), consumer, "snippet.py",
             "expected.json", "result.json"], cwd=folder, capture_output=True, text=True,
            timeout=RUN_TIMEOUT,
            env={k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
            | {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONDONTWRITEBYTECODE": "1"})
        result = (json.loads((folder / "result.json").read_text())
                  if (folder / "result.json").exists()
                  else {"ok": False, "stage": "harness",
                        "error": f"exit {done.returncode}: {done.stderr[-1500:]}"})
    except subprocess.TimeoutExpired:
        result = {"ok": False, "stage": "harness", "error": f"timed out after {RUN_TIMEOUT} s"}
    result["wall_seconds"] = round(time.perf_counter() - start, 1)
    result["skip"] = skip
    if result.get("ok"):
        result["status"] = "PASS"
    elif _blocking(skip) and result.get("stage") in ("snippet", "check"):
        # README says DALI cannot read such a data set: the snippet as printed failing on it
        # is the documented limit, not a fault (its error is kept in the notes).
        result["status"] = "not supported"
    else:
        result["status"] = "FAIL"
    return result


def _headline(error: str) -> str:
    """An error's telling line: DALI's comes after "encountered:", others' first."""
    lines = [ln.strip() for ln in error.splitlines() if ln.strip()]
    if "encountered:" in lines[:-1]:
        return lines[lines.index("encountered:") + 1][:400]
    return (lines[0] if lines else "")[:400]


def _blocking(skip: dict[str, str]) -> dict[str, str]:
    """The reasons that stop README's DALI snippet (it leaves lists of strings out itself)."""
    return {k: v for k, v in skip.items() if "a list of strings" not in v}


# -- versions and the report --------------------------------------------------------------------

DISTS = {
    "project": ("apache-beam", "pyarrow", "numpy", "protobuf"),
    "pytorch": ("torch", "numpy", "apache-beam", "pyarrow", "protobuf"),
    "dali": ("nvidia-dali-cuda120", "numpy"),
    "tfx": ("tfx-bsl", "tensorflow", "tensorflow-cpu", "tensorflow-metadata", "pyarrow",
            "apache-beam", "numpy", "protobuf"),
}
_VERSIONS = """
import importlib.metadata as m, json, platform, sys
out = {"python": platform.python_version()}
for d in sys.argv[1:]:
    try:
        out[d] = m.version(d)
    except m.PackageNotFoundError:
        pass
if "torch" in out:
    import torch
    out["torch build"] = "CUDA " + torch.version.cuda if torch.version.cuda else "CPU only"
print(json.dumps(out))
"""


def versions(python: pathlib.Path, dists: Sequence[str]) -> dict[str, str]:
    done = subprocess.run([str(python), "-c", _VERSIONS, *dists], capture_output=True,
                          text=True, timeout=300)
    return json.loads(done.stdout) if done.returncode == 0 else {"error": done.stderr[-300:]}


def machine() -> str:
    model, mem = "", 0
    try:
        with open("/proc/cpuinfo") as handle:
            model = next((ln.split(":", 1)[1].strip() for ln in handle
                          if ln.startswith("model name")), "")
        with open("/proc/meminfo") as handle:
            mem = next((int(ln.split()[1]) for ln in handle if ln.startswith("MemTotal")), 0)
    except OSError:
        pass
    gpu = "a GPU driver present" if shutil.which("nvidia-smi") else "no GPU"
    return (f"{os.cpu_count()} cores ({model or platform.processor() or 'cpu'}), "
            f"{mem / 2**20:.0f} GiB memory, {platform.system()} {platform.machine()}, {gpu}")


def _cell(result: dict | None) -> str:
    if result is None:
        return "not run"
    counts = f"{result.get('got', 0)}/{result.get('expected', 0)} records"
    if result["status"] == "PASS":
        text = f"PASS, {counts}, {result['wall_seconds']} s"
        if result["skip"]:
            text += " (without " + ", ".join(f"`{k}`" for k in result["skip"]) + ")"
        return text
    if result["status"] == "not supported":
        why = "; ".join(f"`{k}` is {v}" for k, v in _blocking(result["skip"]).items())
        return f"not supported ({why}), {result['wall_seconds']} s"
    return f"FAIL ({result.get('stage', '?')}), {result['wall_seconds']} s"


def write_results(path: pathlib.Path, *, started: datetime.datetime, argv: Sequence[str],
                  envs: dict, env_errors: dict, setup_seconds: dict, table: dict,
                  configs: Sequence[str], consumers: Sequence[str], builds: dict,
                  total: float) -> None:
    lines = ["# Heavy consumers: README's PyTorch, DALI and TFX snippets on every sample config",
             "", "Written by `tests/consumers/run_heavy.py` (overwritten on every run). "
             "Reproduce with", "", "```",
             ".venv/bin/python tests/consumers/run_heavy.py" + "".join(f" {a}" for a in argv),
             "```", "",
             f"- date: {started:%Y-%m-%d %H:%M} UTC; total {total:.0f} s",
             f"- machine: {machine()}",
             f"- commit: {_git_head()}", ""]
    lines += ["## Environments", "", "| consumer | interpreter | versions |", "|---|---|---|"]
    for name, info in envs.items():
        text = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
        made = info.get("made") or {}
        if made.get("note"):
            text += f" ({made['note']})"
        if made:
            text += (f"; made {made['date']} in {made['seconds']} s by `pip install "
                     f"{' '.join(made['pip install'])}`"
                     + ("" if name in setup_seconds else ", reused since"))
        lines.append(f"| {name} | `{info['python']}` | {text} |")
    for name, error in env_errors.items():
        lines.append(f"| {name} | (none) | **could not be made**: {error} |")
    lines += ["", "## Results", "",
              "Each cell: the verdict, records compared (got/expected, the train split), and "
              "the wall time of the snippet's run under the harness (interpreter start and "
              "imports included).", "",
              "| config | train shards | " + " | ".join(consumers) + " |",
              "|---|---|" + "---|" * len(consumers)]
    for config in configs:
        shards = builds.get(config, {}).get("shards", "?")
        cells = [_cell(table.get((config, c))) if c not in env_errors
                 else "FAIL (no environment)" for c in consumers]
        lines.append(f"| {config} | {shards} | " + " | ".join(cells) + " |")
    notes = []
    for (config, consumer), result in sorted(table.items()):
        bits = list(result.get("notes", []))
        if result.get("error"):
            bits.append(f"{result.get('stage')} error: {_headline(result['error'])}")
        if result.get("first_missing"):
            bits.append(f"first missing record: {result['first_missing'][:300]}")
        if result.get("first_extra"):
            bits.append(f"first extra record: {result['first_extra'][:300]}")
        if bits:
            notes.append(f"- {config} / {consumer}: " + "; ".join(bits).replace("|", "\\|"))
    if notes:
        lines += ["", "## Notes", "", *notes]
    lines += ["", "## What is checked", "",
              "The snippet runs unchanged (as README prints it) in a folder where `output/demo` "
              "links to the data set root; tests/consumers/harness.py execs it and compares, as "
              "multisets of records, what it made with `btf.read_examples(<version>, "
              "split=\"train\")` read by the project's environment:",
              "",
              "- pytorch: the snippet's `loader` (2 DataLoader workers) iterated once more, "
              "tensors to lists; a record read twice or never is a failure;",
              "- dali: on a build with `output.index: true`, the snippet's `batch` and further "
              "`pipe.run()` batches up to one epoch, the features DALI can hold (README: no "
              "lists of strings; every record must carry every feature);",
              "- tfx: the snippet's `tensors`, one record per batch row (dense rows, "
              "SparseTensor rows, RaggedTensor `to_list()`).", ""]
    path.write_text("\n".join(lines))


def _git_head() -> str:
    """HEAD, and whether the snippets run and the reader are HEAD's."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                              text=True).stdout

    head = git("log", "-1", "--format=%h %s").strip()
    committed = {k: v for k, v in SNIPPET.findall(git("show", f"HEAD:{READING}"))
                 if k in CONSUMERS}
    current = {k: v for k, v in readme_snippets().items() if k in CONSUMERS}
    bits = ["README's snippets as in HEAD" if committed == current
            else "README's snippets changed since HEAD (the working tree's were run)"]
    if git("status", "--porcelain", "--", "pipelines/read.py").strip():
        bits.append("pipelines/read.py changed since HEAD")
    return f"{head[:100]} ({'; '.join(bits)})"


# -- main ---------------------------------------------------------------------------------------

def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tests/consumers/run_heavy.py",
        description="Run README's PyTorch, DALI and TFX snippets on every sample config in "
                    "their own environments; write tests/consumers/RESULTS.md.")
    parser.add_argument("--consumers", default=",".join(CONSUMERS),
                        help="comma-separated, of " + ", ".join(CONSUMERS))
    parser.add_argument("--configs", default="",
                        help="comma-separated sample configs (default: all with local input)")
    parser.add_argument("--setup-only", action="store_true",
                        help="make the environments and stop")
    parser.add_argument("--keep", metavar="DIR",
                        help="build and run in DIR and keep it (default: a temporary folder)")
    parser.add_argument("--results", default=str(RESULTS), help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = make_parser().parse_args(argv)
    consumers = [c for c in args.consumers.split(",") if c]
    unknown = set(consumers) - set(CONSUMERS)
    if unknown:
        print(f"unknown consumer(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    try:
        import beam_tfrecords  # noqa: F401
    except ImportError:
        print("run it with the project's interpreter: .venv/bin/python "
              "tests/consumers/run_heavy.py", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc)
    clock = time.perf_counter()

    envs: dict[str, dict] = {"project": {"python": _rel(pathlib.Path(sys.executable)),
                                         "versions": versions(pathlib.Path(sys.executable),
                                                              DISTS["project"])}}
    env_errors: dict[str, str] = {}
    setup_seconds: dict[str, float] = {}
    pythons: dict[str, pathlib.Path] = {}
    for consumer in consumers:
        print(f"environment: {consumer}", flush=True)
        log: list[str] = []
        start = time.perf_counter()
        try:
            python = SETUP[consumer](log)
        except (EnvError, subprocess.SubprocessError) as err:
            env_errors[consumer] = str(err)
            print(f"  could not be made: {err}", file=sys.stderr)
            continue
        if log:
            setup_seconds[consumer] = time.perf_counter() - start
        pythons[consumer] = python
        envs[consumer] = {"python": _rel(python), "made": _made(python.parent.parent),
                          "versions": versions(python, DISTS[consumer])}
    if args.setup_only:
        for name, info in envs.items():
            print(name, info)
        return 1 if env_errors else 0

    configs = [c for c in args.configs.split(",") if c] or local_configs()
    work = pathlib.Path(args.keep) if args.keep else pathlib.Path(
        tempfile.mkdtemp(prefix="run-heavy-"))
    work.mkdir(parents=True, exist_ok=True)
    snippets = readme_snippets()
    table: dict[tuple[str, str], dict] = {}
    builds: dict[str, dict] = {}
    try:
        for config in configs:
            print(f"config: {config}", flush=True)
            wanted = {"plain": [c for c in consumers if c != "dali" and c in pythons],
                      "indexed": [c for c in consumers if c == "dali" and c in pythons]}
            for flavour, users in wanted.items():
                if not users:
                    continue
                root = build(config, work / "data" / flavour / config,
                             index=flavour == "indexed")
                expected = expected_values(root, work / "data" / f"{config}-{flavour}.json")
                builds.setdefault(config, {"shards": expected["shards"]})
                for consumer in users:
                    result = run_one(consumer, pythons[consumer], snippets[consumer], root,
                                     expected, work / "runs" / consumer / config)
                    table[(config, consumer)] = result
                    print(f"  {consumer}: {_cell(result)}"
                          + (f" -- {_headline(result['error'])}" if result.get("error")
                             else ""), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    write_results(pathlib.Path(args.results), started=started, argv=argv, envs=envs,
                  env_errors=env_errors, setup_seconds=setup_seconds, table=table,
                  configs=configs, consumers=consumers, builds=builds,
                  total=time.perf_counter() - clock)
    print(f"wrote {args.results}")
    failed = env_errors or any(r["status"] == "FAIL" for r in table.values())
    return 1 if failed else 0


def _rel(path: pathlib.Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
