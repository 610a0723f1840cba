"""The documentation site builds with every warning an error and every reference resolved, and the pages agree with
the code and with each other where a fact has one source (the settings groups, the version, the main job's figures).
"""

import json
import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

import infgrpo
from infgrpo.training.hparams import GROUPS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # builds the docs site in a process of its own
def test_the_docs_build_without_a_warning_and_every_reference_resolves(tmp_path):
    # -W: a warning fails; -n: every cross-reference must resolve (nitpicky); -E: no saved state; -j 1: one process
    command = [sys.executable, "-m", "sphinx", "-W", "-n", "-E", "-q", "-j", "1", "-b", "html", "docs", str(tmp_path)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)  # ~20 s, 2 cores
    assert done.returncode == 0, done.stderr[-6000:]
    settings = (tmp_path / "reference" / "settings.html").read_text()
    missing = [f"{key}.{f.name}" for key, cls in GROUPS.items() for f in fields(cls)]
    missing = [name for name in missing if f"--model.{name}</span>" not in settings]
    assert not missing, f"fields missing from the settings reference: {missing}"


def test_every_link_from_the_docs_to_a_file_of_the_checkout_finds_it():
    # links that leave docs/ (benchmark pages, notebooks, configs) are not part of the site: Sphinx cannot check them
    broken = []
    for page in (ROOT / "docs").rglob("*.md"):
        for target in re.findall(r"\]\((\.\./[^)#\s]+)", page.read_text()):
            if not (page.parent / target).resolve().exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_the_configuration_guide_has_a_row_for_every_settings_group_naming_only_its_fields():
    page = (ROOT / "docs" / "guides" / "configuration.md").read_text()
    rows = {m[1]: m[3] for m in re.finditer(r"^\| `(\w+)` \| `(\w+)` \| (.*) \|$", page, re.MULTILINE)}
    assert set(rows) == set(GROUPS), (
        f"groups without a row: {set(GROUPS) - set(rows)}; rows of no group: {set(rows) - set(GROUPS)}"
    )
    for group, text in rows.items():
        while re.search(r"\([^()]*\)", text):  # what parentheses hold is values, TRL's names and links
            text = re.sub(r"\([^()]*\)", "", text)
        named = set(re.findall(r"`(\w+)`", text))
        unknown = named - {f.name for f in fields(GROUPS[group])}
        assert not unknown, f"model.{group}'s row names what the group does not have: {sorted(unknown)}"


def test_the_version_agrees_in_pyproject_the_package_citation_readme_and_changelog():
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)[1]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    readme = (ROOT / "README.md").read_text()
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert infgrpo.__version__ == version == str(citation["version"])
    assert f"version = {{{version}}}" in readme  # the README's BibTeX
    first_section = re.search(r"^## (.*)$", changelog, re.MULTILINE)[1]
    status = re.search(r"^\*\*Status: (.*?)\*\*", readme, re.MULTILINE)[1]
    if ".dev" in version:  # unreleased work: under "Unreleased", and the README says so
        assert first_section.startswith(f"Unreleased ({version}"), first_section
        paragraph = next(p for p in readme.split("\n\n") if p.startswith("**Status:"))
        assert "unreleased" in status.lower() and version in paragraph
    else:  # a release: its own section first, and the status line names it
        assert first_section.startswith(version) and version in status


def test_the_readme_and_getting_started_quote_the_main_jobs_recorded_figures():
    recorded = json.loads((ROOT / "benchmarks" / "train_tiny.json").read_text())
    figures = [
        f"{recorded['accuracy_before']:.3f}",
        f"{recorded['accuracy_after']:.3f}",
        f"{recorded['fit_wall_time_s']:.0f} s",
    ]
    for page in ("README.md", "docs/getting-started.md"):
        text = (ROOT / page).read_text()
        assert all(figure in text for figure in figures), f"{page} does not quote train_tiny.json's {figures}"
    headline = (ROOT / "benchmarks" / "README.md").read_text()
    assert f"0.100 -> {figures[1]}" in headline and f"in {figures[2]}" in headline


def test_the_converter_pages_example_is_what_the_converter_writes(tmp_path, monkeypatch):
    from infgrpo.from_trl import main

    trl_file, written = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "from_trl.md").read_text(), re.DOTALL)[:2]
    monkeypatch.chdir(tmp_path)  # the header names the file as given
    (tmp_path / "grpo_qwen.yaml").write_text(trl_file)
    assert main(["grpo_qwen.yaml", "-o", "infgrpo_qwen.yaml"]) == 0
    assert (tmp_path / "infgrpo_qwen.yaml").read_text() == written
