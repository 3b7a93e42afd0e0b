"""What the docs name and what the code has, for ``tests/unit/test_docs_in_step.py``.

Two halves, both static (no command is run, no module of the product is imported):

* the docs' side: the Markdown of ``README.md`` and ``docs/*.md`` cut into
  sections, code spans and fenced lines, and what those name (``warmpool``
  subcommands and their flags, environment variables, metric names, links,
  repository paths, ``make`` targets);
* the code's side: an ``ast`` walk over the repository's Python that finds every
  environment variable read (``os.environ``/``os.getenv``, a mapping called
  ``env``/``environ``, helpers handed one, pydantic-settings fields), every
  CloudWatch metric the functions add to their tally and every Prometheus metric
  name of the agent, with names resolved through module constants and imports.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PACKAGES = ("warmpool", "warmpool_cli", "functions", "node_agent", "infra", "emulated", "bench", "simulation", "demo")
"""The project's top-level Python packages (pyproject's ``packages.find``)."""

TOP_FOLDERS = (*PACKAGES, "tests", "docs", "scenarios", "scripts", "sim")
"""Where a repository path a doc names may start (``sim/`` is the old layout: a doc naming it is stale)."""


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# --- the docs' side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Code:
    """One piece of code in a doc: an inline span, or one line of a fenced block."""

    doc: str
    section: str
    text: str
    lang: str = "span"
    """``span`` for an inline code span, else the fenced block's info string (``''``, ``sh``, ``yaml``, ...)."""


@dataclass
class Doc:
    path: Path
    sections: list[tuple[str, str]] = field(default_factory=list)
    """(heading, prose with fenced blocks removed) in order; the part before the first heading has heading ''."""
    code: list[Code] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT))

    def headings(self) -> list[str]:
        return [h for h, _ in self.sections if h]


_SPAN = re.compile(r"(`+)((?:(?!\n\s*\n).)+?)\1", re.S)
"""An inline code span; never across a blank line (an unpaired backtick must not swallow a paragraph)."""


@cache
def parse(path: Path) -> Doc:
    doc = Doc(path)
    heading, fence = "", None
    prose: list[str] = []
    name = str(path.relative_to(ROOT))

    def close() -> None:
        text = "\n".join(prose)
        doc.sections.append((heading, text))
        for m in _SPAN.finditer(text):
            doc.code.append(Code(name, heading, " ".join(m.group(2).split())))  # a span may wrap a line

    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = line.strip().strip("`").strip() if fence is None else None
            continue
        if fence is not None:
            doc.code.append(Code(name, heading, line, fence))
            continue
        if re.match(r"#{1,6} ", line):
            close()
            heading, prose = line.lstrip("#").strip(), []
            continue
        prose.append(line)
    close()
    return doc


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")


def links(doc: Doc) -> Iterator[str]:
    """Link targets in the doc's prose (code spans removed)."""
    for _, text in doc.sections:
        yield from _LINK.findall(_SPAN.sub("", text))


_CMD = re.compile(
    r"(?<![\w.-])(?P<prog>warmpool-agent|warmpool|warmpool_cli\.main)[ \t]+(?P<sub>[a-z][a-z-]*)(?P<rest>[^|;&)\n]*)"
)
_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


@dataclass(frozen=True)
class Command:
    where: Code
    prog: str
    """``warmpool`` or ``warmpool-agent``."""
    sub: str
    flags: tuple[str, ...]


SHELL = ("span", "", "sh", "bash", "shell", "console")
"""Where a command may be named: code spans and shell blocks (a ``text`` block is output)."""


def commands(code: Code) -> Iterator[Command]:
    if code.lang not in SHELL:
        return
    text = code.text if code.lang == "span" else re.sub(r"(^|\s)#.*", "", code.text)  # a shell comment
    for m in _CMD.finditer(text):
        prog = "warmpool-agent" if m["prog"] == "warmpool-agent" else "warmpool"
        yield Command(code, prog, m["sub"], tuple(_FLAG.findall(m["rest"])))


_ENV = re.compile(r"(?<![\w.$])(?:\$\{)?([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b(?!\()")


def env_names(code: Code) -> set[str]:
    """Upper-case names with an underscore (``WARM_IP_TARGET``, ``CNI_NETNS``); an attribute
    (``messages.MAX_ACTIONS``) is left out: it is a constant of the code, not a variable."""
    return set(_ENV.findall(code.text))


_MAKE = re.compile(r"(?<![\w-])make[ \t]+(?:[A-Z_]+=\S*[ \t]+)*([a-z][\w.-]*)")


def make_targets(code: Code) -> set[str]:
    return set(_MAKE.findall(code.text))


_PATH = re.compile(rf"^(?:\./)?((?:{'|'.join(TOP_FOLDERS)})/[\w./-]*?)(?:::[\w.]+)?/?$")


def repo_path(code: Code) -> str | None:
    """A code span that is a path into this repository (``functions/intake.py``,
    ``tests/unit/test_x.py::test_y``, ``emulated/ec2``), else None."""
    m = _PATH.match(code.text)
    return m.group(1) if m else None


# --- the code's side ---------------------------------------------------------------------------


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    consts: dict[str, ast.expr]
    imports: dict[str, tuple[str, str | None]]
    """Local name -> (module, attribute) for ``from m import a``; (module, None) for ``import m``."""
    nodes: list[ast.AST]
    """Every node of the tree (``ast.walk`` once: the scans below all read it)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(package: str, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` names; ``package`` is the importing module's package."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _load(path: Path) -> Module:
    name = _module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    consts: dict[str, ast.expr] = {}
    imports: dict[str, tuple[str, str | None]] = {}
    nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                imports[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            src = _absolute(name if path.name == "__init__.py" else name.rpartition(".")[0], node)
            for a in node.names:
                imports[a.asname or a.name] = (src, a.name)
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    consts[t.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            consts[node.target.id] = node.value
    return Module(name, path, tree, consts, imports, nodes)


@cache
def modules(scope: tuple[str, ...]) -> dict[str, Module]:
    out: dict[str, Module] = {}
    for top in scope:
        for path in sorted((ROOT / top).rglob("*.py")):
            if ".venv" in path.parts or "node_modules" in path.parts:
                continue
            m = _load(path)
            out[m.name] = m
    return out


ALL_CODE = (*PACKAGES, "tests", "scripts")


class Resolver:
    """Constant strings through names, imports and module attributes (``names.ENV_CLUSTER``)."""

    def __init__(self, mods: dict[str, Module]) -> None:
        self.mods = mods

    def value(self, mod: Module, expr: ast.expr | None, depth: int = 0) -> str | None:
        if expr is None or depth > 8:
            return None
        if isinstance(expr, ast.Constant):
            return expr.value if isinstance(expr.value, str) else None
        if isinstance(expr, ast.Name):
            if expr.id in mod.consts:
                return self.value(mod, mod.consts[expr.id], depth + 1)
            src, attr = mod.imports.get(expr.id, ("", None))
            return self.attr(src, attr, depth) if attr else None
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            src, attr = mod.imports.get(expr.value.id, ("", None))
            target = src if attr is None else f"{src}.{attr}"
            return self.attr(target, expr.attr, depth)
        return None

    def attr(self, module: str, name: str, depth: int) -> str | None:
        mod = self.mods.get(module)
        if mod is None:
            return None
        return self.value(mod, ast.Name(name), depth + 1)


_ENV_SHAPE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_ENV_HOLDERS = {"env", "environ", "environment"}
CGI_KEYS = {
    "REQUEST_METHOD",
    "SCRIPT_NAME",
    "PATH_INFO",
    "QUERY_STRING",
    "CONTENT_TYPE",
    "CONTENT_LENGTH",
    "SERVER_NAME",
    "SERVER_PORT",
    "SERVER_PROTOCOL",
    "REMOTE_ADDR",
}
"""The WSGI environ's CGI keys (PEP 3333), and ``HTTP_*``: an HTTP request's, not the process's."""


def _is_env(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Attribute):
        return expr.attr in _ENV_HOLDERS
    return isinstance(expr, ast.Name) and expr.id in _ENV_HOLDERS


def _settings_classes(mod: Module) -> Iterator[ast.ClassDef]:
    for node in mod.nodes:
        if isinstance(node, ast.ClassDef):
            bases = {
                b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases
            }
            if "BaseSettings" in bases:
                yield node


def _key_read(node: ast.AST) -> ast.expr | None:
    """The key ``node`` reads from the environment, if it is such a read."""
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get" and _is_env(f.value) and node.args:
            return node.args[0]  # os.environ.get(K), env.get(K)
        if (isinstance(f, ast.Attribute) and f.attr == "getenv") or (isinstance(f, ast.Name) and f.id == "getenv"):
            return node.args[0] if node.args else None
        if len(node.args) >= 2 and _is_env(node.args[0]):
            return node.args[1]  # a helper handed the environment: _int(env, K, ...)
    elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_env(node.value):
        return node.slice  # env[K]
    elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In) and _is_env(node.comparators[0]):
        return node.left  # K in os.environ
    return None


def _settings_fields(mod: Module, res: Resolver) -> Iterator[tuple[ast.expr, int]]:
    """(the variable, line) of every field of a pydantic-settings class: its alias, or prefix + NAME."""
    for cls in _settings_classes(mod):
        prefix = ""
        for node in ast.walk(cls):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "SettingsConfigDict":
                prefix = next((res.value(mod, kw.value) or "" for kw in node.keywords if kw.arg == "env_prefix"), "")
        for stmt in cls.body:
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            kws = stmt.value.keywords if isinstance(stmt.value, ast.Call) else []
            alias = next((kw.value for kw in kws if kw.arg in ("alias", "validation_alias")), None)
            if alias is not None:
                yield alias, stmt.lineno
            elif stmt.target.id != "model_config":
                yield ast.Constant(prefix + stmt.target.id.upper()), stmt.lineno


def _in(scope: tuple[str, ...]) -> Iterator[tuple[Module, Resolver]]:
    """The modules of the packages in ``scope``, each with a resolver over the whole tree."""
    mods = modules(ALL_CODE)
    res = Resolver(mods)
    for mod in mods.values():
        if mod.name.split(".")[0] in scope:
            yield mod, res


@cache
def env_reads(scope: tuple[str, ...] = PACKAGES) -> dict[str, list[str]]:
    """Every environment variable the code in ``scope`` reads -> where (``path:line``)."""
    out: dict[str, list[str]] = {}
    for mod, res in _in(scope):
        reads = [(key, getattr(node, "lineno", 0)) for node in mod.nodes if (key := _key_read(node)) is not None]
        for expr, line in [*reads, *_settings_fields(mod, res)]:
            v = res.value(mod, expr)
            if v is None or not _ENV_SHAPE.match(v) or v in CGI_KEYS or v.startswith("HTTP_"):
                continue
            out.setdefault(v, []).append(f"{mod.path.relative_to(ROOT)}:{line}")
    return out


@cache
def python_constants() -> set[str]:
    """Upper-case names the code assigns at module or class level (``MAX_ACTIONS``,
    the scenario's ``Env.WARM_IP_TARGET`` field) or imports (``TYPE_CHECKING``):
    a doc naming one names the code."""
    out: set[str] = set()
    for mod in modules(ALL_CODE).values():
        out |= {name for name in mod.imports if name.isupper()}
        bodies = [mod.tree.body] + [n.body for n in mod.nodes if isinstance(n, ast.ClassDef)]
        for body in bodies:
            for node in body:
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, ast.AnnAssign)
                    else []
                )
                out |= {t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()}
    return out


def shell_and_template_names() -> set[str]:
    """``$NAME``/``${NAME}`` in the shell scripts, Dockerfiles and manifests, and the Makefile's variables."""
    out: set[str] = set()
    for pattern in ("infra/**/*.sh", "scripts/**/*.sh", "infra/docker/*Dockerfile*", "k8s/*.yaml"):
        for p in ROOT.glob(pattern):
            text = p.read_text()
            out |= set(re.findall(r"\$\{?([A-Z][A-Z0-9_]*)", text))
            out |= set(re.findall(r"^\s*(?:ENV|ARG)\s+([A-Z][A-Z0-9_]*)", text, re.M))
            out |= set(re.findall(r"^\s+([A-Z][A-Z0-9_]*):", text, re.M))  # a ConfigMap's keys
            out |= set(re.findall(r"-\s*name:\s*([A-Z][A-Z0-9_]*)\s*$", text, re.M))  # a container's env
    make = (ROOT / "Makefile").read_text()
    out |= set(re.findall(r"^(?:export\s+)?([A-Z][A-Z0-9_]*)\s*[:?+]?=", make, re.M))
    return out


def metric_constants() -> dict[str, str]:
    """``warmpool/names.py``'s ``M_*`` -> metric name."""
    mod = modules(ALL_CODE)["warmpool.names"]
    res = Resolver(modules(ALL_CODE))
    return {k: v for k in mod.consts if k.startswith("M_") and (v := res.value(mod, mod.consts[k])) is not None}


@cache
def emitted_metrics() -> dict[str, list[str]]:
    """CloudWatch metrics the product adds to a tally (``tally.add(NAME, ...)``,
    ``tally.observe(NAME, ...)``) -> where."""
    out: dict[str, list[str]] = {}
    for mod, res in _in(PACKAGES):
        for node in mod.nodes:
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            recv = node.func.value
            holder = recv.attr if isinstance(recv, ast.Attribute) else getattr(recv, "id", "")
            if node.func.attr in ("add", "observe") and holder == "tally" and node.args:
                v = res.value(mod, node.args[0])
                if v is not None:
                    out.setdefault(v, []).append(f"{mod.path.relative_to(ROOT)}:{node.lineno}")
    return out


_PROM = re.compile(r"^warmpool_[a-z0-9_]+$")


@cache
def agent_metrics() -> set[str]:
    """The agent's Prometheus metric names (every ``warmpool_*`` string of ``node_agent/``)."""
    out: set[str] = set()
    for mod in modules(ALL_CODE).values():
        if mod.name.startswith("node_agent"):
            out |= {
                n.value
                for n in mod.nodes
                if isinstance(n, ast.Constant) and isinstance(n.value, str) and _PROM.match(n.value)
            }
    return out


def make_targets_defined() -> set[str]:
    make = (ROOT / "Makefile").read_text()
    out = set(re.findall(r"^([a-z][\w.-]*)\s*:(?!=)", make, re.M))
    for line in re.findall(r"^\.PHONY:((?:.*\\\n)*.*)$", make, re.M):
        out |= set(line.replace("\\\n", " ").split())
    return out


_DOTTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)}|sim)(?:\.[A-Za-z_]\w*)+)(?![\w/-])")


def dotted_names(code: Code) -> set[str]:
    """Dotted names into the project's packages (``emulated.local.LocalStack``); not tag keys
    (``warmpool.io/managed``) or schema names (``warmpool.report/v1``)."""
    return set(_DOTTED.findall(code.text))


def resolves(dotted: str) -> bool:
    """``dotted`` is a module of the project, or a name its module defines or imports at top level."""
    mods = modules(ALL_CODE)
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        mod = mods.get(".".join(parts[:k]))
        if mod is None:
            continue
        if k == len(parts):
            return True
        top = {getattr(n, "name", None) for n in mod.tree.body} | set(mod.consts) | set(mod.imports)
        return parts[k] in top
    return False


def imported_modules(mod: Module) -> Iterator[tuple[str, int]]:
    """(module, line) of every import statement in ``mod``, wherever it stands."""
    package = mod.name if mod.path.name == "__init__.py" else mod.name.rpartition(".")[0]
    for node in mod.nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            src = _absolute(package, node)
            for a in node.names:  # `from functions import identity` imports functions.identity
                yield (f"{src}.{a.name}" if f"{src}.{a.name}" in modules(ALL_CODE) else src), node.lineno


def _function(module: str, qualname: str) -> ast.AST:
    node: ast.AST = modules(ALL_CODE)[module].tree
    for part in qualname.split("."):
        node = next(n for n in ast.iter_child_nodes(node) if getattr(n, "name", None) == part)
    return node


def _str_keys(d: ast.Dict) -> set[str]:
    return {k.value for k in d.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def dict_keys(module: str, qualname: str) -> set[str]:
    """The string keys of every dict literal in a function (``Class.method`` or ``function``)."""
    return {k for d in ast.walk(_function(module, qualname)) if isinstance(d, ast.Dict) for k in _str_keys(d)}


def attribute_keys(module: str, cls: str, attr: str) -> set[str]:
    """The keys a class's methods give its dict attribute ``self.<attr>``: ``self.attr = {...}``,
    ``self.attr.update({...})``, ``self.attr["key"] = ...``."""

    def is_attr(e: ast.expr) -> bool:
        return isinstance(e, ast.Attribute) and e.attr == attr

    out: set[str] = set()
    for n in ast.walk(_function(module, cls)):
        if isinstance(n, ast.Assign) and any(is_attr(t) for t in n.targets) and isinstance(n.value, ast.Dict):
            out |= _str_keys(n.value)
        elif isinstance(n, ast.Assign):
            out |= {
                str(t.slice.value)
                for t in n.targets
                if isinstance(t, ast.Subscript) and is_attr(t.value) and isinstance(t.slice, ast.Constant)
            }
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "update"
            and is_attr(n.func.value)
            and n.args
            and isinstance(n.args[0], ast.Dict)
        ):
            out |= _str_keys(n.args[0])
    return out


def _parser_flags(mod: Module) -> dict[str | None, set[str]]:
    """The flags of the argparse parsers a module builds: ``None`` for the top parser, else per
    subparser (``ic = sub.add_parser("install-cni")`` then ``ic.add_argument("--dest")``)."""
    subs: dict[str, str] = {}
    out: dict[str | None, set[str]] = {None: {"-h", "--help"}}
    for n in mod.nodes:
        call = n.value if isinstance(n, ast.Assign) else n
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)) or not call.args:
            continue
        first = call.args[0]
        if call.func.attr == "add_parser" and isinstance(first, ast.Constant) and isinstance(first.value, str):
            out.setdefault(first.value, {"-h", "--help"})
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name):
                subs[n.targets[0].id] = first.value
    for n in mod.nodes:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument":
            owner = subs.get(getattr(n.func.value, "id", ""))
            out.setdefault(owner, set()).update(
                str(a.value) for a in n.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")
            )
    return out


@cache
def cli_flags() -> dict[tuple[str, str], set[str]]:
    """(program, subcommand) -> the flags its parser takes: ``warmpool``'s subcommands are the keys
    of ``warmpool_cli/main.py``'s ``COMMANDS``, each run by ``_run(module, function)``, and their
    parsers are built in that module; ``warmpool-agent``'s are subparsers of ``node_agent/agent.py``."""
    mods = modules(ALL_CODE)
    table = next(
        n.value
        for n in mods["warmpool_cli.main"].tree.body
        if isinstance(n, ast.AnnAssign | ast.Assign) and isinstance(n.value, ast.Dict)
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if getattr(t, "id", "") == "COMMANDS"
    )
    assert isinstance(table, ast.Dict)
    out: dict[tuple[str, str], set[str]] = {}
    for key, value in zip(table.keys, table.values, strict=True):
        run = next(c for c in ast.walk(value) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "_run")
        module = run.args[0]
        assert isinstance(key, ast.Constant) and isinstance(module, ast.Constant)
        out["warmpool", str(key.value)] = _parser_flags(mods[str(module.value)])[None]
    for sub, flags in _parser_flags(mods["node_agent.agent"]).items():
        if sub is not None:
            out["warmpool-agent", sub] = flags
    return out
