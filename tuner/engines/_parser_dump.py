"""Read an sglang release's real launch-server parser and describe it as JSON (stdlib only).

Runs in two places: inside the tuner (tools/dump_sglang_flags.py, for a wheel or a source tree)
and as a script under the ENGINE's interpreter, which has sglang but not the tuner, when a release
has no committed snapshot (tuner/engines/_sglang_live.py):

    <engine python> -c "import runpy; runpy.run_path('.../_parser_dump.py', run_name='__main__')" \
        --installed        # prints the snapshot document on stdout

Importing `sglang.srt.server_args` pulls in torch, CUDA kernels and dozens of packages that
cannot be installed on a machine without a GPU (or were left out with `pip install --no-deps`), so
sglang is imported with every third-party module it cannot find replaced by an inert stand-in and
every sglang module that fails half-way kept as far as it got; `sglang/__init__.py`, which starts
the runtime, is not run. Only the parser definition has to run for real, and a stand-in that
leaked into a type, default or choice list is refused.

This file must import nothing outside the standard library: the engine's Python runs it.
"""

from __future__ import annotations

import abc
import argparse
import enum
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import math
import re
import sys
import tempfile
import types
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SNAPSHOT_FORMAT = 2

# Packages whose mere presence switches sglang to another platform (Ascend, Habana, Intel, Moore
# Threads, Apple). A real CUDA host does not have them, so they must stay absent here too.
_ABSENT_PACKAGES = frozenset(
    {
        "torch_npu",
        "habana_frameworks",
        "intel_extension_for_pytorch",
        "torch_musa",
        "torchada",
        "torch_mlu",
        "mlx",
        "_winapi",
        "msvcrt",
        "winreg",
    }
)
# Attributes of the stand-in torch that sglang inspects while importing: answer as a CUDA build
# would, so platform checks (`torch.version.hip is not None`) take the CUDA branch.
_KNOWN_VALUES: dict[str, Any] = {
    "torch.version.hip": None,
    "torch.version.cuda": "12.9",
    "torch.version.git_version": "0",
    "torch.version.musa": None,
}
_MISSING_ATTRIBUTES = frozenset(
    {"torch.npu", "torch.xpu", "torch.musa", "torch.hpu", "torch.mlu", "torch.mps"}
)


# --------------------------------------------------------------------------- stand-ins


class _StandInMeta(abc.ABCMeta):
    """Every attribute of a stand-in is another stand-in class, so that subclassing, decorating,
    indexing (`torch.Tensor[...]`) and calling all work at import time."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _attribute(cls.__name__, name)

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__

    def __iter__(cls) -> Any:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a bare decorator
        return super().__call__()

    def __repr__(cls) -> str:
        return f"<stand-in {cls.__name__}>"


# Module-level arithmetic on constants of missing packages (`-torch.finfo(...).max`,
# `torch.iinfo(...).max + 1`) must not abort the import of an sglang module the parser needs.
_OPERATORS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift")
_ARITHMETIC = (*_OPERATORS, *(f"r{name}" for name in _OPERATORS), "and", "xor", "matmul")


def _same(self: Any, *args: Any) -> Any:
    return self


for _name in (*_ARITHMETIC, "neg", "pos", "abs", "invert"):
    setattr(_StandInMeta, f"__{_name}__", _same)
for _name, _value in (("int", 0), ("index", 0), ("float", 0.0)):
    setattr(_StandInMeta, f"__{_name}__", lambda self, _v=_value: _v)


def _stand_in(qualname: str) -> type:
    namespace: dict[str, Any] = {
        "__init__": lambda self, *a, **k: None,
        "__getattr__": lambda self, name: _attribute(type(self).__name__ + "()", name),
        "__call__": lambda self, *a, **k: self,
        "__bool__": lambda self: False,
        "__iter__": lambda self: iter(()),
        "__len__": lambda self: 0,
        "__getitem__": lambda self, item: self,
        "__int__": lambda self: 0,
        "__index__": lambda self: 0,
        "__float__": lambda self: 0.0,
        "__get_pydantic_core_schema__": classmethod(_any_schema),
    }
    for name in (*_ARITHMETIC, "neg", "pos", "abs", "invert"):
        namespace[f"__{name}__"] = _same
    return _StandInMeta(qualname, (), namespace)


def _any_schema(cls: type, source: Any, handler: Any) -> Any:
    from pydantic_core import core_schema

    return core_schema.any_schema()


def _attribute(owner: str, name: str) -> Any:
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    qualname = f"{owner}.{name}"
    if qualname in _MISSING_ATTRIBUTES:
        raise AttributeError(qualname)
    if qualname in _KNOWN_VALUES:
        return _KNOWN_VALUES[qualname]
    return _stand_in(qualname)


def _is_stand_in(value: Any) -> bool:
    return isinstance(value, _StandInMeta) or isinstance(type(value), _StandInMeta)


class _StandInModule(types.ModuleType):
    __version__ = "99.0.0"

    def __getattr__(self, name: str) -> Any:
        value = _attribute(self.__name__, name)
        setattr(self, name, value)
        return value


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []  # a package, so `import x.y.z` works below it
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _TolerantModule(types.ModuleType):
    """An sglang module whose import failed half-way: names it never defined are stand-ins."""

    def __getattr__(self, name: str) -> Any:
        return _attribute(self.__name__, name)


class _TolerantLoader(importlib.abc.Loader):
    def __init__(self, real: importlib.abc.Loader, failures: dict[str, str]) -> None:
        self.real = real
        self.failures = failures

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        module.__class__ = _TolerantModule
        try:
            self.real.exec_module(module)
        except Exception as exc:  # the parser only needs what was defined before the failure
            self.failures[module.__name__] = f"{type(exc).__name__}: {exc}"[:160]


class _StandInFinder(importlib.abc.MetaPathFinder):
    """Loads sglang from `root` tolerantly and stands in for third-party modules it lacks."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.stood_in: set[str] = set()
        self.failures: dict[str, str] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        top = name.partition(".")[0]
        if top == "sglang":
            search = path if path is not None else [str(self.root)]
            spec = importlib.machinery.PathFinder.find_spec(name, search)
            if spec is not None and spec.loader is not None:
                spec.loader = _TolerantLoader(spec.loader, self.failures)
            return spec
        if top in _ABSENT_PACKAGES or not _is_import_statement():
            return None  # `importlib.util.find_spec` probes must see what a CUDA host has
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            if finder.find_spec(name, path, target) is not None:
                return None
        self.stood_in.add(top)
        return importlib.util.spec_from_loader(name, _StandInLoader(), is_package=True)


def _is_import_statement() -> bool:
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "_find_and_load_unlocked":
            return True
        if frame.f_code.co_name == "find_spec" and frame.f_globals.get("__name__") == (
            "importlib.util"
        ):
            return False
        frame = frame.f_back
    return False


# --------------------------------------------------------------------------- building the parser


def build_real_parser(root: Path) -> tuple[argparse.ArgumentParser, _StandInFinder]:
    """Import sglang from `root` (the folder holding `sglang/`) and return its parser."""
    finder = _StandInFinder(root)
    sys.meta_path.insert(0, finder)
    # sglang/__init__.py starts the runtime (patches, env checks); the parser needs none of it,
    # so the package is entered as a bare namespace.
    package = types.ModuleType("sglang")
    package.__path__ = [str(root / "sglang")]
    sys.modules["sglang"] = package
    server_args = importlib.import_module("sglang.srt.server_args")
    if "sglang.srt.server_args" in finder.failures:
        raise SystemExit(
            "sglang.srt.server_args itself failed to import: "
            f"{finder.failures['sglang.srt.server_args']}"
        )
    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    server_args.ServerArgs.add_cli_args(parser)
    if not any("--model-path" in action.option_strings for action in parser._actions):
        raise SystemExit(_empty_parser_message(finder.stood_in))
    return parser, finder


# Packages that sglang declares its arguments with: standing in for them leaves the parser empty.
_DECLARING_PACKAGES = ("msgspec", "pydantic")


def _empty_parser_message(stood_in: set[str]) -> str:
    needed = [name for name in _DECLARING_PACKAGES if name in stood_in]
    if needed:
        return (
            f"sglang's parser came out empty without {' and '.join(needed)}: install it into "
            f"that environment (pip install {' '.join(needed)})"
        )
    missing = ", ".join(sorted(stood_in)) or "nothing"
    return f"sglang's parser came out empty (no --model-path); missing packages: {missing}"


# --------------------------------------------------------------------------- describing it

_KINDS: list[tuple[type[argparse.Action], str]] = [
    (argparse._StoreTrueAction, "store_true"),
    (argparse._StoreFalseAction, "store_false"),
    (argparse._StoreConstAction, "store_const"),
    (argparse._AppendConstAction, "append_const"),
    (argparse._AppendAction, "append"),
    (argparse._CountAction, "count"),
    (argparse._StoreAction, "store"),
    (argparse.BooleanOptionalAction, "boolean_optional"),
]


def describe_parser(parser: argparse.ArgumentParser) -> list[dict[str, Any]]:
    """Every option of `parser` as plain JSON data, in the parser's order."""
    leaks: list[str] = []
    options = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for attr in ("type", "default", "choices", "const"):
            value = getattr(action, attr)
            values = value if isinstance(value, list | tuple | set | frozenset) else [value]
            if any(_is_stand_in(v) for v in values):
                leaks.append(f"{action.dest}.{attr}")
        options.append(describe_action(action))
    if leaks:
        raise SystemExit(
            "a stand-in for a missing package leaked into the parser (" + ", ".join(leaks) + "); "
            "install the package it comes from (see PYTHONPATH in this script's docstring)"
        )
    return options


def describe_action(action: argparse.Action) -> dict[str, Any]:
    """One option as JSON data; what is None (no type, no choices, ...) or not required is left
    out, and so is the help text, which no check reads."""
    kind = next((name for cls, name in _KINDS if type(action) is cls), None)
    option: dict[str, Any] = {
        "dest": action.dest,
        "flags": list(action.option_strings),
        "kind": kind or "custom",
    }
    if kind is None:
        option["action_class"] = type(action).__name__
        for extra in ("error_message", "new_flag", "const_value"):
            if getattr(action, extra, None) is not None:
                option[extra] = _jsonable(getattr(action, extra))
    option["type"] = _type_name(action.type)
    option["nargs"] = action.nargs
    option["const"] = _jsonable(action.const)
    option["default"] = _jsonable(action.default)
    option["choices"] = None if action.choices is None else _jsonable_choices(action.choices)
    if action.required:
        option["required"] = True
    return {key: value for key, value in option.items() if value is not None}


def _type_name(converter: Any) -> str | None:
    if converter is None:
        return None
    return getattr(converter, "__name__", type(converter).__name__)


def _jsonable_choices(choices: Iterable[Any]) -> list[Any]:
    values = [_jsonable(c) for c in choices]
    if isinstance(choices, set | frozenset):
        values.sort(key=str)  # sets have no order; a stable file diffs cleanly
    return values


def _jsonable(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, set | frozenset):
        return _jsonable_choices(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return repr(value)


def snapshot_document(version: str, source: str, parser: argparse.ArgumentParser) -> dict[str, Any]:
    return {
        "format": SNAPSHOT_FORMAT,
        "sglang_version": version,
        "source": source,
        "generated_by": "tools/dump_sglang_flags.py",
        "options": describe_parser(parser),
    }


# --------------------------------------------------------------------------- inputs


def unpack_wheel(wheel: Path, into: Path) -> str:
    """Extract the sglang package of a wheel; return the version from its metadata."""
    with zipfile.ZipFile(wheel) as archive:
        version = None
        for name in archive.namelist():
            if name.endswith(".dist-info/METADATA"):
                text = archive.read(name).decode("utf-8")
                match = re.search(r"^Version:\s*(\S+)", text, re.MULTILINE)
                version = match.group(1) if match else None
            if name.startswith("sglang/") and name.endswith(".py"):
                archive.extract(name, into)
    if version is None:
        raise SystemExit(f"{wheel}: no Version in the wheel's METADATA")
    return version


def source_version(root: Path) -> str:
    text = (root / "sglang" / "version.py").read_text(encoding="utf-8")
    match = re.search(r"__version__\s*=\s*[\"']([^\"']+)", text)
    if not match:
        raise SystemExit(f"{root}/sglang/version.py: no __version__")
    return match.group(1)


def installed_root() -> tuple[str, Path]:
    """The installed sglang's release and the folder that holds its package, found without
    running `sglang/__init__.py`."""
    import importlib.metadata

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("sglang is not installed for this Python")
    package = Path(next(iter(spec.submodule_search_locations)))
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        version = source_version(package.parent)  # a source tree on PYTHONPATH
    return version, package.parent


def dump(source: Path | None) -> dict[str, Any]:
    """The snapshot document of a wheel, an unpacked source tree, or (None) the installed sglang.
    Run it once per process: two sglang releases cannot share one interpreter."""
    with tempfile.TemporaryDirectory(prefix="sglang-src-") as tmp:
        if source is None:
            version, root = installed_root()
            label = "installed"
        elif source.is_file():
            version = unpack_wheel(source, Path(tmp))
            root, label = Path(tmp), f"wheel {source.name}"
        else:
            root, version = source, source_version(source)
            label = f"source tree sglang {version}"
        parser, finder = build_real_parser(root)
        document = snapshot_document(version, label, parser)
    print(f"stood in for: {', '.join(sorted(finder.stood_in)) or 'nothing'}", file=sys.stderr)
    for module, error in sorted(finder.failures.items()):
        print(f"partly imported {module}: {error}", file=sys.stderr)
    return document


def main(argv: list[str] | None = None) -> int:
    """Print the snapshot document of a wheel / source tree, or of the installed sglang."""
    cli = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    cli.add_argument("source", nargs="?", type=Path, help="sglang wheel or unpacked source tree")
    cli.add_argument("--installed", action="store_true", help="use the installed sglang")
    args = cli.parse_args(argv)
    if args.installed == (args.source is not None):
        cli.error("give either a wheel / source folder or --installed")
    document = dump(None if args.installed else args.source)
    print(json.dumps(document, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
