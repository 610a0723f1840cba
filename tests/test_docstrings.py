"""Every public module, class, function and method of the package (and of the checkout's benchmarks) has a docstring."""

import importlib
import inspect
import pkgutil

import benchmarks
import infgrpo


def public_objects():
    """(qualified name, object) for every public module, and the classes, functions and methods it defines."""
    packages = [
        *pkgutil.walk_packages(infgrpo.__path__, "infgrpo."),
        *pkgutil.walk_packages(benchmarks.__path__, "benchmarks."),
    ]
    for info in packages:
        if any(part.startswith("_") and part != "__main__" for part in info.name.split(".")):
            continue
        module = importlib.import_module(info.name)
        yield info.name, module
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                yield f"{info.name}.{name}", obj
            elif inspect.isclass(obj):
                yield f"{info.name}.{name}", obj
                for attr, member in vars(obj).items():
                    if attr.startswith("_"):
                        continue
                    func = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                    if inspect.isfunction(func) and func.__qualname__.startswith(obj.__qualname__ + "."):
                        yield f"{info.name}.{name}.{attr}", func


def test_every_public_object_has_a_docstring():
    objects = dict(public_objects())
    assert len(objects) > 150  # modules, classes, functions and methods were all found
    missing = sorted(name for name, obj in objects.items() if not (obj.__doc__ or "").strip())
    assert not missing, f"{len(missing)} public objects without a docstring:\n" + "\n".join(missing)
