"""Build stream_client.py, the one file users copy, from the package in src/stream_client/.

    python3 tools/amalgamate.py            write stream_client.py at the top of the checkout
    python3 tools/amalgamate.py --check    exit 1 if the committed file is not what src/ builds
    python3 tools/amalgamate.py --where N  the src/ file and line that stream_client.py's line N came from

As SQLite's amalgamation is built, the modules are joined in one fixed order,
the order of the layers (``MODULES``), each behind a banner that names its
file. Their standard-library imports are gathered at the top, and their
relative imports are dropped: in one file every module's names are already
there. Every other line is copied as it is, so a line of a user's traceback
leads back to one line of src/ (``--where``).

It refuses, naming the file and line: a module missing from ``MODULES`` or a
file missing from the package, an import of a module that comes later (or of
a name that module does not define), a name defined at the top level of two
modules, and a name that resolves nowhere in its module.
"""
import argparse
import ast
import builtins
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / 'src' / 'stream_client'
TARGET = ROOT / 'stream_client.py'
COMMAND = 'python3 tools/amalgamate.py'

# The layers, bottom to top: a module imports only from modules before it. __init__ (the map, the version
# check and __all__) opens the file and __main__ closes it.
MODULES = ('_limits', '_sse', '_json', '_ecma', '_schema', '_dialects', '_validator', '_chat', '_responses',
           '_messages', '_answer', '_http', '_reader', '_headers', '_request', '_salt', '_exchange', '_verdict',
           '_failures', '_record', '_transport', '_machine', '_runs', '_processes', '_plan', '_load', '_gates',
           '_tails', '_summary', '_comparison', '_otel', '_workloads', '_sessions', '_session_summary', '_trace',
           '_report', '_benchmark_report', '_evidence', '_server_metrics', '_live_metrics', '_args', '_workload_flags',
           '_steps', '_views', '_engine', '_workloads_cli', '_exporter', '_exporter_cli', '_cli')
_ALWAYS_BOUND = set(dir(builtins)) | {'__file__', '__name__', '__doc__', '__spec__', '__builtins__'}


class AmalgamationError(Exception):
    """The package cannot be joined into one file; the message names the file and line."""


class Module:
    """One source file of the package, parsed: its imports, the names it defines, its other lines."""

    def __init__(self, name: str, text: str) -> None:
        self.name, self.path = name, f'src/stream_client/{name}.py'
        self.lines = text.split('\n')
        try:
            self.tree = ast.parse(text, self.path)
        except SyntaxError as exc:
            raise AmalgamationError(f'{self.path}:{exc.lineno}: {exc.msg}') from None
        self.docstring = ast.get_docstring(self.tree, clean=False)
        self.imports = [node for node in self.tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        self.defined = dict(_top_level_names(self.tree))

    def relative_imports(self) -> list[ast.ImportFrom]:
        return [node for node in self.imports if isinstance(node, ast.ImportFrom) and node.level > 0]

    def library_imports(self) -> list[ast.stmt]:
        return [node for node in self.imports if not (isinstance(node, ast.ImportFrom) and node.level > 0)]

    def skipped_lines(self) -> set[int]:
        """The line numbers (from 1) the file leaves out: its imports and its docstring."""
        skipped = {number for node in self.imports for number in range(node.lineno, node.end_lineno + 1)}
        if self.docstring is not None:
            first = self.tree.body[0]
            skipped |= set(range(first.lineno, first.end_lineno + 1))
        return skipped


def _top_level_names(tree: ast.Module):
    """(name, line) for each name a module binds at its top level, imports aside."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name, node.lineno
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        yield name.id, node.lineno


def _bound_anywhere(tree: ast.Module) -> set[str]:
    """Every name the module binds in any scope: a generous check, meant to catch a name the split lost."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split('.')[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
    return bound


def load_package(package: Path = PACKAGE) -> dict[str, Module]:
    """Every module of the package by name, after checking that the files and MODULES agree."""
    files = {path.stem for path in package.glob('*.py')}
    expected = set(MODULES) | {'__init__', '__main__'}
    for name in sorted(files - expected):
        raise AmalgamationError(f'src/stream_client/{name}.py is not in MODULES in tools/amalgamate.py: '
                                'add it in its place among the layers')
    for name in sorted(expected - files):
        raise AmalgamationError(f'src/stream_client/{name}.py is missing (it is in MODULES in tools/amalgamate.py)')
    return {name: Module(name, (package / f'{name}.py').read_text(encoding='utf-8')) for name in sorted(files)}


def check(modules: dict[str, Module]) -> None:
    """Raise AmalgamationError on the first thing that would make the one file differ from the package."""
    seen: dict[str, str] = {}
    for name in MODULES:
        module = modules[name]
        for defined, line in module.defined.items():
            if defined in seen:
                raise AmalgamationError(f'{module.path}:{line}: {defined} is defined in {seen[defined]} too; '
                                        'in one file the second would replace the first')
            seen[defined] = module.path
    for module in modules.values():
        _check_imports(module, modules)
        _check_names(module)


def _check_imports(module: Module, modules: dict[str, Module]) -> None:
    position = MODULES.index(module.name) if module.name in MODULES else None
    for node in module.relative_imports():
        source = (node.module or '').lstrip('.')
        if node.level != 1 or source not in MODULES:
            raise AmalgamationError(f'{module.path}:{node.lineno}: imports {"." * node.level}{source}, which is '
                                    'not a module in MODULES')
        if position is not None and MODULES.index(source) >= position:
            raise AmalgamationError(f'{module.path}:{node.lineno}: imports .{source}, which comes later in the '
                                    f'layers than {module.name}: move the name down, or the module up')
        for alias in node.names:
            if alias.asname is not None:
                raise AmalgamationError(f'{module.path}:{node.lineno}: imports {alias.name} as {alias.asname}; '
                                        'in one file a name has one spelling')
            if alias.name not in modules[source].defined:
                raise AmalgamationError(f'{module.path}:{node.lineno}: {alias.name} is not defined at the top '
                                        f'of {modules[source].path}')
    for node in module.library_imports():
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or '']
        if any(name.split('.')[0] == 'stream_client' for name in names):
            raise AmalgamationError(f'{module.path}:{node.lineno}: imports the package by name; use a relative '
                                    'import')


def _check_names(module: Module) -> None:
    known = _bound_anywhere(module.tree) | _ALWAYS_BOUND
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in known:
            raise AmalgamationError(f'{module.path}:{node.lineno}: {node.id} resolves nowhere: import it from '
                                    'the module below that defines it')


def _import_lines(modules: dict[str, Module], skip: set[str]) -> list[str]:
    """Every module's standard-library imports, each once: ``import`` lines, then ``from`` lines."""
    plain: dict[str, str] = {}
    froms: dict[str, set[str]] = {}
    for name in MODULES:
        module = modules[name]
        for node in module.library_imports():
            if isinstance(node, ast.Import):
                for alias in node.names:
                    line = module.lines[node.lineno - 1].strip()
                    comment = line[line.index('#'):] if '#' in line and len(node.names) == 1 else ''
                    plain.setdefault(alias.name, f'import {alias.name}' + (f'  {comment}' if comment else ''))
            else:
                froms.setdefault(node.module, set()).update(alias.name for alias in node.names)
    lines = [line for name, line in sorted(plain.items()) if name not in skip]
    lines += [f'from {name} import {", ".join(sorted(names))}' for name, names in sorted(froms.items())]
    return lines


def build(modules: dict[str, Module]) -> list[tuple[str, tuple[str, int] | None]]:
    """The one file, as (line, origin) pairs: origin is the (src path, line) a line came from, or None."""
    check(modules)
    head = modules['__init__']
    out: list[tuple[str, tuple[str, int] | None]] = [
        (f'# Generated by {COMMAND} from src/stream_client/ ({len(MODULES)} modules): do not edit this file; '
         f'edit src/ and run {COMMAND}.', None)]
    first = head.tree.body[0]
    out += [(line, (head.path, number)) for number, line in enumerate(head.lines[:first.end_lineno], 1)]
    own = {alias.name for node in head.library_imports() if isinstance(node, ast.Import) for alias in node.names}
    guard = next((node for node in head.tree.body if isinstance(node, ast.If)), None)
    split_at = guard.end_lineno if guard is not None else max(node.end_lineno for node in head.imports)
    relative = {number for node in head.relative_imports() for number in range(node.lineno, node.end_lineno + 1)}
    for number in range(first.end_lineno + 1, len(head.lines) + 1):
        if number not in relative:
            out.append((head.lines[number - 1], (head.path, number)))
        if number == split_at:
            out += [('', None)] + [(line, None) for line in _import_lines(modules, own)]
    for name in MODULES + ('__main__',):
        out += _module_lines(modules[name])
    while out and not out[-1][0].strip():
        out.pop()
    return out


def _module_lines(module: Module) -> list[tuple[str, tuple[str, int] | None]]:
    """A module behind its banner: its docstring as comments, then every line but its imports."""
    out = [('', None), ('', None), (f'# ==== {module.path} ====', None)]
    if module.docstring is not None:
        start = module.tree.body[0].lineno
        for offset, line in enumerate(module.docstring.strip('\n').split('\n')):
            out.append((f'# {line}'.rstrip(), (module.path, start + offset)))
    skipped = module.skipped_lines()
    body = [(line, (module.path, number)) for number, line in enumerate(module.lines, 1) if number not in skipped]
    while body and not body[0][0].strip():
        body.pop(0)
    while body and not body[-1][0].strip():
        body.pop()
    out.append(('', None))
    blank = 0
    for line, origin in body:  # two blank lines at most where an import was taken out
        blank = blank + 1 if not line.strip() else 0
        if blank <= 2:
            out.append((line, origin))
    return out


def text_of(lines: list[tuple[str, tuple[str, int] | None]]) -> str:
    return '\n'.join(line for line, _ in lines) + '\n'


def first_difference(built: str, committed: str) -> int | None:
    """The first line (from 1) where two texts differ, or None when they are equal."""
    if built == committed:
        return None
    old, new = committed.split('\n'), built.split('\n')
    return next((number for number, (a, b) in enumerate(zip(old, new), 1) if a != b), min(len(old), len(new)) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='tools/amalgamate.py', description=__doc__.split('\n')[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument('--check', action='store_true', help='exit 1 if stream_client.py is not what src/ builds')
    action.add_argument('--where', type=int, metavar='N', help="the src/ file and line of stream_client.py's line N")
    args = parser.parse_args(argv)
    try:
        lines = build(load_package())
    except AmalgamationError as exc:
        print(f'{parser.prog}: error: {exc}', file=sys.stderr)
        return 2
    if args.where is not None:
        if not 1 <= args.where <= len(lines):
            print(f'{parser.prog}: error: stream_client.py has {len(lines)} lines, not {args.where}', file=sys.stderr)
            return 2
        origin = lines[args.where - 1][1]
        print(f'{origin[0]}:{origin[1]}' if origin else f'line {args.where} is made by the generator (a banner, '
                                                          'a gathered import or the first line)')
        return 0
    built = text_of(lines)
    if args.check:
        committed = TARGET.read_text(encoding='utf-8') if TARGET.exists() else ''
        line = first_difference(built, committed)
        if line is None:
            print(f'stream_client.py is what src/stream_client/ builds ({len(lines)} lines, {len(MODULES)} modules)')
            return 0
        origin = lines[line - 1][1] if line <= len(lines) else None
        where = f' ({origin[0]}:{origin[1]})' if origin else ''
        print(f'stream_client.py differs from what src/stream_client/ builds, first at line {line}{where}: '
              f'run {COMMAND} and commit both', file=sys.stderr)
        return 1
    TARGET.write_text(built, encoding='utf-8')
    print(f'wrote stream_client.py: {len(lines)} lines from {len(MODULES)} modules')
    return 0


if __name__ == '__main__':
    sys.exit(main())
