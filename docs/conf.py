"""Sphinx configuration of infgrpo's documentation (``sphinx-build -W -n docs docs/_build/html``).

Markdown pages through MyST; the API and the settings reference come from the docstrings (reStructuredText
with Sphinx roles) through autodoc and napoleon. Nothing is downloaded: references into torch, transformers,
Lightning and the other libraries stay unresolved by pattern (``nitpick_ignore_regex``), every reference to
infgrpo's own names must resolve (``-n``), and a warning fails the build (``-W``).
"""

import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))  # the checkout's infgrpo, not an installed copy
sys.path.insert(0, str(DOCS / "_ext"))

import infgrpo  # noqa: E402

project = "infgrpo"
author = "The infgrpo developers"
copyright = "2026, The infgrpo developers"
release = infgrpo.__version__
version = ".".join(release.split(".")[:2])

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "infgrpo_docs"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "design"]  # design/: research notes for the next issues, not pages of the site
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
suppress_warnings = ["myst.header"]  # pages that start below a level-1 title are included ones

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True

nitpicky = True
# Names of other libraries (no inventory is fetched) and typing's spellings stay plain text.
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|transformers|lightning|L|pl|peft|datasets|bitsandbytes|tokenizers|numpy|np|trl)(\..*)?"),
    (r"py:.*", r"(typing|collections|collections\.abc|dataclasses|pathlib|concurrent\.futures|asyncio|types)\..*"),
    (r"py:.*", r"(Tensor|LightningModule|LightningDataModule|PreTrainedModel|PreTrainedTokenizerBase|Dataset)"),
    (r"py:.*", r"(DatasetDict|Callback|Trainer|Cache|GenerationConfig|PeftModel|Path|Callable|Iterator|Sequence)"),
    (r"py:.*", r"(Mapping|Iterable|Any|Literal|Self|TypeVar|T|Generator|NamedTuple|Enum|ModuleType|Future)"),
    (r"py:.*", r"(contextlib|os|random|enum|argparse|jsonargparse|inspect|json|re|threading|io)\..*"),
    (r"py:.*", r"(optional|default|callable|function|module|class|RichProgressBar|TQDMProgressBar)"),
    # the benchmark pages live beside their JSON in the checkout, outside this site: plain text here, links on
    # GitHub (tests/test_docs.py checks that every such file exists)
    ("myst", re.escape(str(DOCS.parent / "benchmarks")) + r"/.*"),
]

html_theme = "alabaster"
html_title = f"infgrpo {release}"
html_static_path = []
