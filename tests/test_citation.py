"""CITATION.cff is valid Citation File Format 1.2.0 and cites both the software and the paper.

The schema beside this file is the official one, https://citation-file-format.github.io/1.2.0/schema.json
(CC-BY-4.0), as shipped by ``cffconvert``; this test runs the check ``cffconvert --validate`` runs
(JSON-schema validation with format checks) without depending on cffconvert, which pins jsonschema < 4.
"""

import json
from pathlib import Path

import jsonschema
import yaml

import infgrpo

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = Path(__file__).with_name("cff_schema_1.2.0.json")


class _StrDates(yaml.SafeLoader):
    """YAML loader that keeps dates as strings, as CFF validators do."""


_StrDates.add_constructor("tag:yaml.org,2002:timestamp", _StrDates.construct_yaml_str)


def load_citation() -> dict:
    return yaml.load((ROOT / "CITATION.cff").read_text(), Loader=_StrDates)  # noqa: S506 - a SafeLoader subclass


def test_citation_cff_is_valid_against_the_cff_1_2_0_schema():
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    problems = validator.iter_errors(load_citation())
    errors = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in problems]
    assert not errors, "CITATION.cff does not validate:\n" + "\n".join(errors)


def test_citation_cites_the_software_and_the_infinite_sampling_paper():
    cff = load_citation()
    assert cff["type"] == "software"
    assert str(cff["version"]) == infgrpo.__version__
    papers = [r for r in cff["references"] if "2506.22950" in r.get("url", "")]
    assert papers, "the Infinite Sampling paper (arXiv 2506.22950) must be under references"
    assert papers[0]["title"].startswith("Infinite Sampling: Efficient and Stable Grouped RL Training")
    assert papers[0]["year"] == 2025 and papers[0]["authors"][0]["family-names"] == "Wang"
