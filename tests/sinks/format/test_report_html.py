"""The version report (sinks/format/report_html.py): values from data show as text, the page
loads nothing and runs nothing, the same input gives the same bytes, and what a reader
needs -- the numbers, the comparison, the anomalies -- is on the page.

The statistics are real: computed by the build's accumulators over small data and passed
through our wire encoder and decoder, as a version's ``FeatureStats.pb`` is
(tests/helpers.py ``report_sample``). The page is parsed by the standard library's HTML
parser, which tokenizes as browsers do; tests/consumers/test_report_browser.py opens it in Chromium.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import html.parser
import re

import pytest
from beam_tfrecords_tests_helpers import HOSTILE, report_sample, split_statistics

from beam_tfrecords.sinks.format.report_html import (
    Anomaly,
    Reason,
    VersionFacts,
    facts_from_manifest,
    render_report,
)
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec


class _Page(html.parser.HTMLParser):
    """Elements, attributes and text of a page, as a browser's tokenizer sees them."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []
        self.styles: list[str] = []
        self._in_style = False
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        (self.styles if self._in_style else self.text).append(data)


@pytest.fixture(scope="module")
def sample():
    return report_sample()


@pytest.fixture(scope="module")
def page(sample):
    return render_report(*sample)


def test_values_from_data_show_as_text_and_never_as_markup(page):
    """Feature names, top values, file names, reasons and dead-letter previews hold
    ``<script>`` and ``</svg><img onerror=...>``: the page has no script or img element and
    no event-handler attribute, and the hostile strings are in its text, as text."""
    parsed = _Page(page)
    tags = {tag for tag, _ in parsed.tags}
    assert tags & {"script", "img", "iframe", "object", "embed", "foreignobject"} == set()
    assert [attrs for tag, attrs in parsed.tags if tag == "link"] == [
        {"rel": "icon", "href": "data:,"}]
    handlers = [(tag, name) for tag, attrs in parsed.tags for name in attrs
                if name.startswith("on")]
    assert handlers == []
    hrefs = {attrs["href"] for tag, attrs in parsed.tags if tag == "a"}
    assert hrefs and all(re.fullmatch(r"#f\d+", h) for h in hrefs)  # ids are ours, not names
    text = "".join(parsed.text)
    for hostile in HOSTILE:
        assert hostile in text
    assert "gs://bucket/in/<img src=x onerror=alert(1)>.csv:18" in text  # a file name
    assert f"'n/a', {HOSTILE[1]!r}]" in text  # a dead-letter record preview


def test_control_and_bidi_characters_are_spelled_out():
    """A value holding a right-to-left override or a NUL would make the page read other than
    the data is; such characters are shown as escapes."""
    current, _, _ = report_sample(hostile=False)
    tricky = "abc\u202edef\x00"
    facts = dataclasses.replace(current, rejected=(Reason(tricky, 1),))
    text = "".join(_Page(render_report(facts)).text)
    assert "abc\\u202edef\\u0000" in text and "\u202e" not in text


def test_the_policy_forbids_scripts_and_remote_loads_and_allows_the_stylesheet(page):
    parsed = _Page(page)
    policies = [attrs["content"] for tag, attrs in parsed.tags
                if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy"]
    assert len(policies) == 1
    rules = dict(rule.strip().split(" ", 1) for rule in policies[0].split(";"))
    assert rules["default-src"] == "'none'"
    assert "script-src" not in rules and "connect-src" not in rules
    (style,) = parsed.styles
    digest = base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()
    assert rules["style-src"] == f"'sha256-{digest}'"
    assert not [attrs for _, attrs in parsed.tags if "style" in attrs]  # would be refused
    # The policy comes before anything it governs.
    assert page.index("Content-Security-Policy") < page.index("<style>")


def test_the_same_input_gives_the_same_bytes(page):
    assert render_report(*report_sample.__wrapped__()) == page  # computed afresh


def test_summary_numbers_comparison_and_anomalies_are_on_the_page(sample, page):
    current, previous, anomalies = sample
    text = " ".join(_Page(page).text)
    for shown in ("500", "records written", "509", "records read", "1.8 KB", "input unread",
                  "20260501T030000Z", "-16.7%", "income: not a number",
                  "an unterminated quote runs to the end of the file",
                  "5 of 7 shards within the band 1.0 MB – 2.0 MB"):
        assert shown in text, shown
    for anomaly in anomalies:
        assert anomaly.description in text
    # A flagged feature's section is marked; a feature that appeared is badged, one that
    # went is listed.
    assert re.search(r'<section class="feature flagged" id="f\d+"><h3>income', page)
    assert re.search(r"<h3>signup_channel<span class=\"badge\">STRING</span>"
                     r"<span class=\"badge\">new</span>", page)
    assert "No longer present: <code>legacy_flag</code>" in page
    assert re.search(r">nz</text>.{0,300}?%\s*new</text>", page)  # a value never seen before
    # Splits side by side: both splits' columns in each feature's section.
    section = page[page.index("<h3>income"):]
    section = section[:section.index("</section>")]
    assert section.count('<div class="split"><h4>') == 2


def test_a_version_without_statistics_gets_a_report_that_says_so():
    current, previous, _ = report_sample(hostile=False)
    bare = dataclasses.replace(current, statistics=None)
    text = " ".join(_Page(render_report(bare, previous)).text)
    assert "This version has no statistics" in text
    text = " ".join(_Page(render_report(current, dataclasses.replace(
        previous, statistics=None))).text)
    assert "The other version has no statistics" in text


def test_facts_from_a_manifest():
    manifest = {"name": "d", "version": "v1", "created": "c", "compression": "gzip",
                "counts": {"read": 3, "written": 3, "rejected": 0},
                "splits": {"train": {"records": 3, "bytes": 30, "shards": [
                    {"path": "train/d-00000-of-00001.tfrecord.gz", "records": 3, "bytes": 30,
                     "crc32c": "AAAAAA=="}]}},
                "config": {"output": {"shard_size": {"target": 20, "min": 10, "max": 40}}}}
    facts = facts_from_manifest(manifest)
    assert facts == VersionFacts(name="d", version="v1", created="c", compression="gzip",
                                 counts=manifest["counts"], records={"train": 3},
                                 shards={"train": (30,)}, band=(10, 20, 40))
    assert facts_from_manifest({**manifest, "config": {}}).band is None


def test_numbers_an_empty_feature_and_infinities_do_not_break_the_page():
    specs = [FeatureSpec("x", "float", missing="omit"), FeatureSpec("never", "int64",
                                                                      missing="omit")]
    rows = [{"x": v, "never": None} for v in (float("inf"), 1.0, float("nan"), -2.0)]
    stats = {"train": split_statistics(rows, specs, "train")}
    page = render_report(VersionFacts(name="d", version="v", records={"train": 4},
                                      statistics=stats))
    text = " ".join(_Page(page).text)
    assert "not charted: the values include infinities" in text
    assert "4 (100.0%)" in text  # "never": missing in every example


def test_anomalies_round_trip_and_refuse_unknown_severities():
    anomaly = Anomaly("f", "new_values", "new value 'x'", "warning")
    assert Anomaly.from_dict(anomaly.to_dict()) == anomaly
    with pytest.raises(ValueError, match="severity 'fatal'"):
        Anomaly("f", "k", "d", "fatal")


def test_an_image_feature_shows_its_formats_and_sizes():
    """Image bytes get no top values (megabyte values) but the formats, width and height the
    readers take from each header."""
    from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
    from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator, kinds_for_specs
    from beam_tfrecords.transforms.stats.statistics_wire import (
        decode_statistics_list,
        encode_statistics_list,
    )

    specs = [FeatureSpec("image", "bytes")]
    acc = DatasetAccumulator(kinds_for_specs(specs, images=["image"]))
    encoder = ExampleEncoder(specs)
    acc.add_serialized(encoder.encode({"image": b"\x89PNG" + bytes(n)}) for n in (10, 90))
    acc.add_image_facts("image", ["PNG", "JPEG"], [28, 480], [32, 640])
    stats = {"train": decode_statistics_list(encode_statistics_list([acc.result("train")]))[0]}
    page = render_report(VersionFacts(name="d", version="v", records={"train": 2},
                                      statistics=stats))
    text = " ".join(_Page(page).text)
    assert "32×28 – 640×480 px" in text
    assert "14 B – 94 B, avg 54 B" in text
    assert re.search(r">PNG</text>.{0,200}50\.0%", page)


@pytest.mark.parametrize("value", [0.0, 1.7e18, -3.2e15])
def test_a_histogram_of_one_value_draws_at_any_magnitude(value):
    """One value, however large (a date as nanoseconds since 1970 is ~1.7e18, where adding 0.5
    changes nothing), is a bar on an axis around it, not a division by zero."""
    from beam_tfrecords.sinks.format.svg_charts import histogram_svg

    page = histogram_svg([(value, value, 7.0)], label="when")
    assert page.count('class="bar"') == 1 and "nan" not in page and "inf" not in page


def test_duplicates_and_their_examples_show_as_text():
    """The duplicates section: counts per split and examples whose previews and split names
    come from data, escaped; a version without the count has no section."""
    current, _, _ = report_sample(hostile=False)
    assert "Duplicates and leaks" not in render_report(current)
    facts = dataclasses.replace(current, duplicates={
        "splits": {HOSTILE[1]: {"records": 10, "distinct": 8, "duplicates": 2, "leaked": 3}},
        "in_several_splits": 3,
        "examples": [{"fingerprint": "0000a1b2c3d4e5f6", "copies": {HOSTILE[1]: 2},
                      "bytes": 40, "preview": HOSTILE[0]},
                     {"fingerprint": "0001000000000000", "copies": {"train": 3}}]})
    page = render_report(facts)
    parsed = _Page(page)
    assert {tag for tag, _ in parsed.tags} & {"script", "img"} == set()
    text = "".join(parsed.text)
    assert HOSTILE[0] in text and HOSTILE[1] in text
    assert "3 distinct records in more than one split" in text
    assert "0001000000000000: train ×3 (its bytes were not sampled" in text


def test_estimated_duplicates_say_so_with_their_standard_errors():
    """Past a bucket's capacity the counts come from a sample: the page marks them as
    estimates, with one standard error, and says how much was sampled."""
    current, _, _ = report_sample(hostile=False)
    facts = dataclasses.replace(current, duplicates={
        "method": "fingerprint64", "exact": False, "sampled": 0.25,
        "splits": {"train": {"records": 9_000_000, "distinct": 8_997_600, "duplicates": 2_400,
                             "leaked": 800,
                             "standard_error": {"duplicates": 85, "leaked": 49}}},
        "in_several_splits": 400, "examples": []})
    text = "".join(_Page(render_report(facts)).text)
    assert "≈2,400 ± 85" in text and "≈800 ± 49" in text and "≈8,997,600" in text
    assert "sample of at least 25.0% of the distinct records" in text
