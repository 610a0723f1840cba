"""Sphinx extension of infgrpo's docs: pages written from the code at build time, so they cannot drift.

- ``.. infgrpo-settings::`` — the settings reference: every group of ``GRPOModule``
  (:data:`infgrpo.training.hparams.GROUPS`), each field with its YAML key, type, default and the attribute
  docstring written under it in the source (read by Sphinx's own source analyzer, as autodoc reads them).
- ``.. infgrpo-modules:: infgrpo.sampler`` — one ``automodule`` section per module of a package, found by
  walking the package, so a new module joins the reference without editing a page.
- ``.. infgrpo-import-map::`` — the floors of docs/architecture.md, drawn as written and checked against the
  package's imports (:mod:`import_map`): a room that is gone, a module in no room, an import up a floor or a
  circle of imports is a warning, so the build (``-W``) fails until the map and the code agree.
- References to a name through the package that re-exports it (``infgrpo.MicroGroupSampler``,
  ``infgrpo.sampler.SamplerConfig``) resolve to where the object is documented (its defining module).
- Objects documented on a page of their own (the public names, the settings groups) are left out of the
  module sections, so each object is described once.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import typing
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from import_map import parse_floors, problems
from sphinx.application import Sphinx
from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles
from sphinx.util.typing import stringify_annotation

PUBLIC_PAGE = {
    "infgrpo.module.GRPOModule",
    "infgrpo.sampler.sampler.MicroGroupSampler",
    "infgrpo.sampler.rollouts.Rollouts",
    "infgrpo.data.datamodule.PromptDataModule",
    "infgrpo.settings.InfgrpoWarning",
    "infgrpo.evaluation.evaluate",
    "infgrpo.trainer.fsdp2.FSDP2Strategy",
}
"""Objects the API page (``api/index.md``) documents; the module sections skip them."""
logger = logging.getLogger(__name__)


def groups() -> dict[str, type]:
    """``GRPOModule``'s settings groups by key, as the module builds them."""
    from infgrpo.training.hparams import GROUPS

    return GROUPS


def canonical(obj: object) -> str | None:
    """``module.qualname`` where ``obj`` is defined, or None for what has no such name."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else None


def field_type(cls: type, field: dataclasses.Field) -> str:
    """The field's annotation with its aliases (``Decoder``) expanded to what they stand for."""
    try:
        hint = typing.get_type_hints(cls)[field.name]
    except Exception:  # an annotation that names a TYPE_CHECKING-only import: shown as written
        return str(field.type)
    return stringify_annotation(hint, "fully-qualified-except-typing")


def field_default(field: dataclasses.Field) -> str:
    """The default as Python writes it (a factory is called), or ``required``."""
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return repr(field.default_factory())
    return "required"


def data_groups() -> dict[str, type]:
    """The data module's settings groups by dotted key (``data.mixture``, its sources)."""
    from infgrpo.data.mixture import DatasetMixture, DatasetSource

    return {"data.mixture": DatasetMixture, "data.mixture.datasets[i]": DatasetSource}


def group_lines(key: str, cls: type) -> list[str]:
    """reStructuredText of one group (``key``: ``sampler`` for ``model.sampler``, or a dotted key of its own): a
    section, the class with its docstring, and its fields."""
    path = canonical(cls)
    docs = ModuleAnalyzer.for_module(cls.__module__).find_attr_docs()
    key = key if "." in key else f"model.{key}"
    title = f"``{key}``: {cls.__name__}"
    lines = [title, "-" * len(title), "", f".. py:class:: {cls.__qualname__}", f"   :module: {cls.__module__}", ""]
    lines += [f"   {line}" if line else "" for line in inspect.getdoc(cls).splitlines()] + [""]
    for field in dataclasses.fields(cls):
        doc = docs.get((cls.__qualname__, field.name))
        if not doc:
            raise ValueError(f"{path}.{field.name} has no docstring: write one under the field")
        lines += [
            f"   .. py:attribute:: {field.name}",
            f"      :type: {field_type(cls, field)}",
            f"      :value: {field_default(field)}",
            "",
            f"      ``--{key}.{field.name}``" if "[" not in key else f"      ``{key}.{field.name}`` (in YAML)",
            "",
            *(f"      {line}" if line else "" for line in doc),
            "",
        ]
    return lines


class SettingsReference(SphinxDirective):
    """``.. infgrpo-settings::``: every settings group of ``GRPOModule``, one section each."""

    def run(self) -> list[nodes.Node]:
        """The sections, parsed as reStructuredText."""
        lines: list[str] = []
        for key, cls in {**groups(), **data_groups()}.items():
            lines += group_lines(key, cls)
            self.env.note_dependency(inspect.getsourcefile(cls))
        return self.parse(lines)

    def parse(self, lines: list[str]) -> list[nodes.Node]:
        """The nodes of generated reStructuredText, sections allowed."""
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=self.get_source_info()[0]), node)
        return node.children


class ModuleSections(SettingsReference):
    """``.. infgrpo-modules:: PACKAGE``: an ``automodule`` section for the package and each of its modules."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        """The sections, parsed as reStructuredText."""
        package = importlib.import_module(self.arguments[0])
        names = [package.__name__]
        if hasattr(package, "__path__"):
            walked = pkgutil.walk_packages(package.__path__, package.__name__ + ".")
            names += sorted(info.name for info in walked)
        lines: list[str] = []
        for name in names:
            # a package's own members only (its re-exports are documented where they are defined)
            options = ["   :ignore-module-all:"] if name == package.__name__ and len(names) > 1 else []
            lines += [f"``{name}``", "-" * (len(name) + 4), "", f".. automodule:: {name}", *options, ""]
        return self.parse(lines)


class ImportMap(SphinxDirective):
    """``.. infgrpo-import-map::`` with one floor a line (rooms, then three spaces and what they are), top first."""

    has_content = True

    def run(self) -> list[nodes.Node]:
        """The floors as a literal block; one warning for each place the package's imports differ from them."""
        package = Path(importlib.import_module("infgrpo").__file__).parent
        for module in package.rglob("*.py"):
            self.env.note_dependency(str(module))
        for problem in problems(package, parse_floors(list(self.content))):
            logger.warning(f"docs/architecture.md's map: {problem}", location=self.get_location())
        lines = [line.rstrip() for line in self.content if line.strip()]
        text = "\n".join([lines[0], *(f"  -> {line}" for line in lines[1:])])
        return [nodes.literal_block(text, text)]


def skip_documented_elsewhere(app, what, name, obj, skip, options):
    """autodoc-skip-member: leave out of module sections what a page of its own documents."""
    own = {canonical(c) for c in (*groups().values(), *data_groups().values())}
    if what == "module" and canonical(obj) in PUBLIC_PAGE | own:
        return True
    return None


def find(path: str) -> object | None:
    """The object a dotted path names (a module, then attributes), or None."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable module prefix, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def methods_named(module: str, name: str) -> list[str]:
    """``module.Class.name`` for each class defined in ``module`` that has an attribute ``name``."""
    found = find(module)
    classes = inspect.getmembers(found, inspect.isclass) if inspect.ismodule(found) else []
    return [f"{module}.{c.__name__}.{name}" for _, c in classes if c.__module__ == module and hasattr(c, name)]


def resolve_in_code(app: Sphinx, env, node, contnode):
    """missing-reference: a Python reference Sphinx could not resolve is looked up in the code.

    The target is tried as written, then from the module and class the reference sits in (docstrings say
    ``:class:`Rollouts``` inside :mod:`infgrpo.sampler.sampler`). An object found there resolves to where it
    is documented (its defining module), so re-exports link; one that exists but has no documentation (a
    constant, a type variable, a private helper) is shown as code without a link. A name found nowhere stays
    a warning: that is a broken reference.
    """
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip(".~")
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if module and cls:
        candidates.append(f"{module}.{cls}.{target}")
    if module:
        candidates.append(f"{module}.{target}")
        candidates += [f"{module.rsplit('.', n)[0]}.{target}" for n in range(1, module.count("."))]
        candidates += methods_named(module, target)  # a module docstring's :meth:`rows` of its one class
    for path in candidates:
        if not path.startswith("infgrpo"):
            continue
        obj = find(path)
        if obj is None:
            continue
        name = obj.__name__ if inspect.ismodule(obj) else canonical(obj)
        domain = env.get_domain("py")
        for where in dict.fromkeys([name, path]):  # the defining module first, then the path that found it
            if where and where != node["reftarget"]:
                found = domain.resolve_any_xref(env, node["refdoc"], app.builder, where, node, contnode)
                if found:
                    return found[0][1]
        return contnode  # in the code, not documented: plain code text
    return None


def plain_attribute_docstrings(app: Sphinx) -> None:
    """Napoleon reads an attribute docstring's first ``words: text`` as a type and a description (Google's
    inline attribute style); ours are prose ("Dynamic sampling: ..."), so napoleon is kept to the rest."""
    for listener in list(app.events.listeners["autodoc-process-docstring"]):
        if getattr(listener.handler, "__module__", "") == "sphinx.ext.napoleon":
            napoleon = listener.handler

            def handler(app, what, name, obj, options, lines, napoleon=napoleon):
                if what not in ("attribute", "data", "property"):
                    napoleon(app, what, name, obj, options, lines)

            app.disconnect(listener.id)
            app.connect("autodoc-process-docstring", handler, priority=listener.priority)


def setup(app: Sphinx) -> dict:
    """Registers the directives and the event handlers (after napoleon, whose handler it narrows)."""
    app.setup_extension("sphinx.ext.napoleon")
    plain_attribute_docstrings(app)
    app.add_directive("infgrpo-settings", SettingsReference)
    app.add_directive("infgrpo-modules", ModuleSections)
    app.add_directive("infgrpo-import-map", ImportMap)
    app.connect("autodoc-skip-member", skip_documented_elsewhere)
    app.connect("missing-reference", resolve_in_code)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
