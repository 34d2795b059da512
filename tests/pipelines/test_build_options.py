"""BuildOptions: Beam's pipeline options with each view made once (pipelines/runners.py)."""

from __future__ import annotations

import pickle

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    TypeOptions,
)

from beam_tfrecords.pipelines.runners import BuildOptions


def test_a_view_is_made_once_and_shares_the_values_of_every_other_view():
    options = BuildOptions(["--direct_num_workers=3"])
    assert options.view_as(TypeOptions) is options.view_as(TypeOptions)
    options.view_as(StandardOptions).runner = "FnApiRunner"
    assert PipelineOptions.view_as(options, StandardOptions).runner == "FnApiRunner"
    assert options.view_as(DirectOptions).direct_num_workers == 3
    assert options.get_all_options()["runner"] == "FnApiRunner"


def test_pickled_options_keep_their_values_and_not_their_views():
    options = BuildOptions(["--direct_num_workers=2"])
    options.view_as(TypeOptions)
    copy = pickle.loads(pickle.dumps(options))
    assert "_views" not in copy.__dict__
    assert copy.view_as(DirectOptions).direct_num_workers == 2
    assert copy.get_all_options() == options.get_all_options()


def _options_made_while_building(options: PipelineOptions, steps: int, monkeypatch) -> int:
    made = []
    real = PipelineOptions.__init__

    def counting(self, *args, **kwargs):
        made.append(type(self).__name__)
        real(self, *args, **kwargs)

    monkeypatch.setattr(PipelineOptions, "__init__", counting)
    p = beam.Pipeline(options=options)
    values = p | beam.Create([1, 2, 3])
    for step in range(steps):  # typed steps: Beam type-checks each against the last
        values = values | f"Step{step}" >> beam.Map(lambda x: x + 1).with_input_types(
            int).with_output_types(int)
    monkeypatch.undo()
    return len(made)


def test_type_checks_while_building_parse_the_flags_once_per_view(monkeypatch):
    # Beam asks for view_as(TypeOptions) at every type check: with its own options that is a
    # new argparse parse each time, so the parses grow with the steps; with BuildOptions they
    # are one per kind of view, whatever the number of steps.
    beam = [_options_made_while_building(PipelineOptions([]), n, monkeypatch) for n in (10, 30)]
    ours = [_options_made_while_building(BuildOptions([]), n, monkeypatch) for n in (10, 30)]
    assert beam[1] - beam[0] >= 20, beam  # the cost the class exists for is still Beam's
    assert ours[1] == ours[0], ours
