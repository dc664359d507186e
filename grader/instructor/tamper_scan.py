"""Tamper evidence: a static scan of a submission for the primitives a forged report needs.

A rank runs the student's code in its own process, beside the rank side of the grader, so that code can
forge what the rank reports (docs/SECURITY.md, "Forged facts"). A forgery needs a way in: the grader's
modules or `sys.modules`, the caller's frames, a function's closure or globals (a hook the grader registered
holds the lists it fills), the garbage collector's objects, `ctypes`, a raw write
to a descriptor the code did not open, an attribute rebound on a module it does not own, code run from a
string built at run time. The scan reads each graded file's syntax tree (it never runs it) and marks
every such use with its line and a sentence. A mark asks an instructor to look; it never changes a score.

It is detection, not prevention: names built at run time in ways the scan does not follow evade it.
Ordinary idioms stay unmarked (`os.environ[...]`, `torch.manual_seed`, `setattr(self, ...)`, a write
to a descriptor the same code opened, `gc.collect()`, `"torch" in sys.modules`, settings under
`torch.backends`): every reference solution, correct alternative and named mistake scans clean.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING

from grader.report.inert import one_line
from grader.student_files import MAX_SOURCE_BYTES

if TYPE_CHECKING:
    from grader.grading import ExerciseFiles

MAX_MARKS = 50  # per file: a file holding thousands of primitives says so once, not thousands of times
SHOWN = 80  # characters of the student's code quoted in a reason
MAX_NESTING = 4  # exec of a literal whose text is scanned in turn, this many deep

FRAME_FUNCTIONS = frozenset(
    {
        "sys._getframe",
        "sys._current_frames",
        "inspect.currentframe",
        "inspect.stack",
        "inspect.trace",
        "inspect.getouterframes",
        "inspect.getinnerframes",
        "traceback.walk_stack",
    }
)
FRAME_ATTRIBUTES = frozenset({"f_back", "f_locals", "f_globals", "f_builtins", "tb_frame", "gi_frame", "cr_frame"})
# what a function holds: the variables it captured and its module's names; through a hook the grader registered
# (an optimizer's, a module's), they reach the lists the grader's hooks fill
FUNCTION_INTERNALS = frozenset({"__closure__", "cell_contents", "__globals__"})
TRACERS = frozenset(
    {"sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile", "threading.settrace_all_threads"}
)
GC_WALKERS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
IMPORT_HOOKS = frozenset({"sys.meta_path", "sys.path_hooks", "sys.path_importer_cache"})
MEMORY_MODULES = frozenset({"ctypes", "_ctypes", "cffi"})
DYNAMIC_IMPORTS = frozenset({"builtins.__import__", "importlib.import_module", "importlib.__import__"})
RUNNERS = frozenset({"builtins.exec", "builtins.eval", "builtins.compile"})
# what opens a descriptor the calling code then owns
DESCRIPTOR_SOURCES = frozenset(
    {"os.open", "os.pipe", "os.pipe2", "os.dup", "os.openpty", "os.memfd_create", "os.eventfd", "tempfile.mkstemp"}
)
# what writes to (or wraps) a raw descriptor: the positions of its descriptor arguments
DESCRIPTOR_WRITERS = {
    "os.write": (0,),
    "os.writev": (0,),
    "os.pwrite": (0,),
    "os.pwritev": (0,),
    "os.sendfile": (0,),
    "os.fdopen": (0,),
    "os.dup2": (0, 1),
    "socket.fromfd": (0,),
}
FILE_OPENERS = frozenset({"builtins.open", "io.open", "io.FileIO"})  # a path or a descriptor: an int is marked
STANDARD_STREAMS = (0, 1, 2)
# attributes of modules the submission does not own that are settings to set, not functions to replace
SETTINGS = ("torch.backends.", "torch._dynamo.config.", "torch._inductor.config.", "sys.stdout", "sys.stderr")
SYS_MODULES_WRITES = frozenset({"pop", "popitem", "update", "setdefault", "clear", "__setitem__", "__delitem__"})
SYS_MODULES_LOOKUPS = frozenset({"get", "__getitem__", "__contains__"})
_SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@dataclass(frozen=True)
class ReviewMark:
    """One place in a graded file that an instructor should look at, and why."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


def _shown(node: ast.AST) -> str:
    """The student's expression as a reason quotes it: one line, short."""
    return one_line(ast.unparse(node), SHOWN)


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _is_grader(module: str) -> bool:
    return module == "grader" or module.startswith("grader.")


class _Scan:
    """One file's marks. Names are resolved flow-insensitively: `import torch.distributed as dist` and
    `d = dist` make `d.all_reduce` torch.distributed.all_reduce anywhere in the file."""

    def __init__(self, tree: ast.Module, filename: str, offset: int, depth: int) -> None:
        self.filename = filename
        self.offset = offset  # lines before this source in its file (the text of an exec'd literal)
        self.depth = depth
        self.marks: dict[tuple[int, str], None] = {}
        self.parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        self.aliases: dict[str, str] = {}
        self.bound: set[str] = set()
        for node in ast.walk(tree):
            self._bind(node)
        for _ in range(2):  # an alias of an alias
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    if (name := self.qualify(node.value)) is not None:
                        self.aliases[node.targets[0].id] = name
        self.descriptors: dict[ast.AST, set[str]] = {}  # scope -> names bound to descriptors it opened
        self.descriptor_attributes: set[str] = set()  # `self.fd = os.open(...)`: `x.fd` is the code's own
        self.range_names: dict[ast.AST, set[str]] = {}  # scope -> `for fd in range(...)` names
        for node in ast.walk(tree):
            self._note_descriptors(node)
        self.tree = tree

    # --- names -----------------------------------------------------------------------------------
    def _bind(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    self.aliases[top] = top
                self.bound.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if node.level == 0 and node.module and alias.name != "*":
                    self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                self.bound.add(alias.asname or alias.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            self.bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            self.bound.add(node.name)
        elif isinstance(node, ast.arg):
            self.bound.add(node.arg)

    def qualify(self, node: ast.AST) -> str | None:
        """The dotted name `node` stands for when it is rooted in an import or a builtin, else None."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if node.id == "__builtins__":
                return "builtins"
            return None if node.id in self.bound else f"builtins.{node.id}"
        if isinstance(node, ast.Attribute):
            base = self.qualify(node.value)
            return f"{base}.{node.attr}" if base is not None else None
        if isinstance(node, ast.Subscript) and self.qualify(node.value) == "sys.modules":
            return _literal(node.slice)
        if isinstance(node, ast.Call) and node.args:
            called = self.qualify(node.func)
            if called in DYNAMIC_IMPORTS:
                module = _literal(node.args[0])
                return module.split(".")[0] if module and called != "importlib.import_module" else module
            if called == "builtins.getattr" and len(node.args) >= 2 and (attr := _literal(node.args[1])):
                base = self.qualify(node.args[0])
                return f"{base}.{attr}" if base is not None else None
        return None

    def _imported(self, node: ast.AST) -> bool:
        """Whether `node` is rooted in something imported (a module, a class of one), not in a builtin."""
        name = self.qualify(node)
        return name is not None and (not name.startswith("builtins.") or name == "builtins")

    # --- descriptors -----------------------------------------------------------------------------
    def scope(self, node: ast.AST) -> ast.AST:
        while not isinstance(node, _SCOPES):
            node = self.parents[node]
        return node

    def _opens(self, value: ast.AST) -> bool:
        return isinstance(value, ast.Call) and self.qualify(value.func) in DESCRIPTOR_SOURCES

    def _note_descriptors(self, node: ast.AST) -> None:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign) and self._opens(node.value):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None and self._opens(node.value):
            targets = [node.target]
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            if isinstance(node.iter, ast.Call) and self.qualify(node.iter.func) == "builtins.range":
                self.range_names.setdefault(self.scope(node), set()).add(node.target.id)
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Name):
                    self.descriptors.setdefault(self.scope(node), set()).add(part.id)
                elif isinstance(part, ast.Attribute):
                    self.descriptor_attributes.add(part.attr)

    def _in_scope(self, table: dict[ast.AST, set[str]], name: str, node: ast.AST) -> bool:
        """Whether `name` is in `table` for the scope of `node` or one enclosing it."""
        scope: ast.AST | None = self.scope(node)
        while scope is not None:
            if name in table.get(scope, ()):
                return True
            scope = self.scope(self.parents[scope]) if scope in self.parents else None
        return False

    def _own_descriptor(self, arg: ast.AST) -> bool:
        """A descriptor the code opened itself (or a standard stream's): not one it inherited."""
        if isinstance(arg, ast.Constant):
            return arg.value in STANDARD_STREAMS
        if isinstance(arg, ast.Name):
            return self._in_scope(self.descriptors, arg.id, arg)
        if isinstance(arg, ast.Attribute):
            return arg.attr in self.descriptor_attributes
        if isinstance(arg, ast.Call):
            return self._opens(arg) or (isinstance(arg.func, ast.Attribute) and arg.func.attr == "fileno")
        return False

    def _a_descriptor_number(self, arg: ast.AST) -> bool:
        """An argument of open() that is a descriptor number, not a path: an int, or a `range` loop's name."""
        if isinstance(arg, ast.Constant):
            return isinstance(arg.value, int) and not isinstance(arg.value, bool) and arg.value not in STANDARD_STREAMS
        return isinstance(arg, ast.Name) and self._in_scope(self.range_names, arg.id, arg)

    # --- marks -----------------------------------------------------------------------------------
    def mark(self, node: ast.AST, reason: str) -> None:
        line = self.offset + getattr(node, "lineno", 1)
        self.marks.setdefault((line, reason), None)

    def run(self) -> list[ReviewMark]:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self._import(node, alias.name)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                self._import(node, node.module)
            elif isinstance(node, ast.Call):
                self._call(node)
                if self.qualify(node.func) == "builtins.getattr":  # getattr(sys, "_getframe") is sys._getframe
                    self._reference(node)
            elif isinstance(node, ast.Attribute):
                self._attribute(node)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
                self._item_store(node)
            if isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Load):
                self._reference(node)
        return [ReviewMark(self.filename, line, reason) for line, reason in sorted(self.marks)]

    def _import(self, node: ast.AST, module: str) -> None:
        if _is_grader(module):
            self.mark(node, f"imports {one_line(module, SHOWN)}, a module of the grader's own: no exercise needs it")
        elif module.split(".")[0] in MEMORY_MODULES:
            self.mark(node, f"imports {module}, which reads and writes any memory of the process")

    def _reference(self, node: ast.Name | ast.Attribute | ast.Call) -> None:
        name = self.qualify(node)
        if name is None:
            return
        if name in FRAME_FUNCTIONS:
            self.mark(node, f"uses {name}: the grader's own variables are a frame or two up the stack")
        elif name in TRACERS:
            self.mark(node, f"installs a trace or profile function ({name}), which sees every frame of the process")
        elif name in GC_WALKERS:
            self.mark(node, f"uses {name}, which reaches every object of the process, the grader's among them")
        elif name in IMPORT_HOOKS:
            self.mark(node, f"uses {name}, which decides how every later import of the process is loaded")
        elif name == "sys.modules":
            self._sys_modules(node)

    def _attribute(self, node: ast.Attribute) -> None:
        if node.attr in FRAME_ATTRIBUTES:
            self.mark(node, f"reads .{node.attr}: a frame's variables, the grader's among them, can be changed")
        elif node.attr in FUNCTION_INTERNALS:
            self.mark(node, f"reads .{node.attr}: a function's captured variables, a grader hook's among them")
        if isinstance(node.ctx, ast.Store | ast.Del):
            self._rebinds(node, node.value, node.attr)

    def _rebinds(self, node: ast.AST, owner: ast.AST, attribute: str | None) -> None:
        """Mark `owner.attribute = ...` (or `del`, `setattr`) when `owner` is imported, not the submission's."""
        if not self._imported(owner):
            return
        name = self.qualify(owner) or ""
        if attribute is not None and f"{name}.{attribute}".startswith(SETTINGS):
            return
        what = f"rebinds {name}.{one_line(attribute, SHOWN)}" if attribute else f"rebinds an attribute of {name}"
        if name == "builtins":
            self.mark(node, f"{what}, a builtin every module of the process sees")
        else:
            self.mark(node, f"{what}: {name} is imported, a module (or its class) the submission does not own")

    def _namespace_of(self, node: ast.AST) -> ast.AST | None:
        """X, when `node` is X's attributes as a dict: `X.__dict__`, `vars(X)`, `__builtins__` (a dict in modules)."""
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return node.value
        if isinstance(node, ast.Call) and self.qualify(node.func) == "builtins.vars" and node.args:
            return node.args[0]
        return node if isinstance(node, ast.Name) and node.id == "__builtins__" else None

    def _item_store(self, node: ast.Subscript) -> None:
        """`X.__dict__[k] = v`, `vars(X)[k] = v`, `__builtins__[k] = v`: a rebinding of X's attribute k."""
        if (owner := self._namespace_of(node.value)) is not None:
            self._rebinds(node, owner, _literal(node.slice))

    def _call(self, node: ast.Call) -> None:
        called = self.qualify(node.func) or ""
        first = node.args[0] if node.args else None
        if called in DYNAMIC_IMPORTS and first is not None:
            module = _literal(first)
            if module is None:
                self.mark(node, f"{called.removeprefix('builtins.')}() of a module name computed at run time")
            else:
                self._import(node, module)
        elif called in RUNNERS and first is not None:
            self._runs(node, called.removeprefix("builtins."), first)
        elif called in DESCRIPTOR_WRITERS:
            for index in DESCRIPTOR_WRITERS[called]:
                if index < len(node.args) and not self._own_descriptor(node.args[index]):
                    self.mark(
                        node,
                        f"{called}() on descriptor {_shown(node.args[index])}, which this code did not open: "
                        "an inherited descriptor is the grader's channel",
                    )
        elif called in FILE_OPENERS and first is not None and self._a_descriptor_number(first):
            self.mark(node, f"{called.removeprefix('builtins.')}() of descriptor {_shown(first)}, an inherited one")
        elif called in ("builtins.setattr", "builtins.delattr") and first is not None:
            self._rebinds(node, first, _literal(node.args[1]) if len(node.args) > 1 else None)
        elif called == "builtins.getattr" and len(node.args) > 1 and _literal(node.args[1]) in FRAME_ATTRIBUTES:
            self.mark(node, f"reads .{_literal(node.args[1])}: a frame's variables, the grader's among them")
        elif called == "builtins.getattr" and len(node.args) > 1 and _literal(node.args[1]) in FUNCTION_INTERNALS:
            self.mark(
                node, f"reads .{_literal(node.args[1])}: a function's captured variables, a grader hook's among them"
            )
        elif isinstance(node.func, ast.Attribute) and node.func.attr in ("__setattr__", "__delattr__"):
            self._rebinds(node, node.func.value, _literal(first))
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "update":
            if (owner := self._namespace_of(node.func.value)) is not None:
                self._rebinds(node, owner, None)

    def _runs(self, node: ast.Call, runner: str, source: ast.AST) -> None:
        """exec/eval/compile: a literal's text is scanned as code; anything else cannot be read here."""
        text = source.value if isinstance(source, ast.Constant) else None
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        if not isinstance(text, str):
            self.mark(node, f"{runner}() of a string built at run time ({_shown(source)}): code the scan cannot read")
        elif self.depth >= MAX_NESTING:
            self.mark(node, f"{runner}() of a literal nested in {MAX_NESTING} others: not scanned further")
        else:
            start = self.offset + getattr(source, "lineno", 1) - 1
            for inner in _marks(text, self.filename, start, self.depth + 1):
                self.marks.setdefault((inner.line, inner.reason), None)

    def _sys_modules(self, node: ast.Name | ast.Attribute | ast.Call) -> None:
        """`"torch" in sys.modules` and a look-up of a module by its literal name are reads; a write, a
        look-up of the grader's or of a computed name, and the table as a whole are marked."""
        parent = self.parents.get(node)
        key: ast.AST | None = None
        if isinstance(parent, ast.Compare) and node in parent.comparators:
            if all(isinstance(op, ast.In | ast.NotIn) for op in parent.ops):
                key = parent.left
        elif isinstance(parent, ast.Subscript) and parent.value is node:
            if isinstance(parent.ctx, ast.Store | ast.Del):
                self.mark(parent, "writes sys.modules, the table of loaded modules the grader's are in")
                return
            key = parent.slice
        elif isinstance(parent, ast.Attribute) and parent.value is node:
            call = self.parents.get(parent)
            if parent.attr in SYS_MODULES_WRITES:
                self.mark(parent, f"changes sys.modules (.{parent.attr}), the table of loaded modules")
                return
            if parent.attr in SYS_MODULES_LOOKUPS and isinstance(call, ast.Call) and call.func is parent:
                key = call.args[0] if call.args else None
        if key is None:
            self.mark(node, "reads sys.modules as a whole, where every loaded module is found, the grader's too")
        elif isinstance(key, ast.Name) and key.id == "__name__":
            return  # the submission's own module
        elif (module := _literal(key)) is None:
            self.mark(node, f"looks up a module under a name computed at run time ({_shown(key)}) in sys.modules")
        elif _is_grader(module):
            self.mark(node, f"looks up {one_line(module, SHOWN)}, a module of the grader's own, in sys.modules")


def _marks(source: str, filename: str, offset: int = 0, depth: int = 0) -> list[ReviewMark]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # Python cannot import it either (grader/student_files.py): the grading says so, nothing of it runs
    return _Scan(tree, filename, offset, depth).run()


def scan(source: str, filename: str) -> list[ReviewMark]:
    """The marks of one file's source, by line, at most `MAX_MARKS` (the last then says more were cut).

    Source Python cannot parse gets none (it cannot run either); source the scan cannot follow to its end
    (an expression nested deeper than the scan recurses, or a defect of the scan's) gets one that says so:
    the grade never depends on the scan."""
    try:
        marks = _marks(source, filename)
    except Exception as exc:
        return [ReviewMark(filename, 1, f"could not be scanned ({type(exc).__name__}): review it by hand")]
    if len(marks) > MAX_MARKS:
        cut = marks[MAX_MARKS - 1]
        more = len(marks) - MAX_MARKS + 1
        marks = [*marks[: MAX_MARKS - 1], ReviewMark(filename, cut.line, f"and {more} more marks from here on")]
    return marks


def scan_files(files: ExerciseFiles) -> tuple[ReviewMark, ...]:
    """The marks of every file that is graded. A notebook's are said of the notebook, at its cell's line.
    A file over the grader's size limit, or not text Python can decode, is not graded: nothing of it runs."""
    notebooks = {source_map.module: source_map for source_map in files.source_maps.values()}
    marks: list[ReviewMark] = []
    for path in sorted(p for p in files.folder.glob("*.py") if p.is_file()):
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_SOURCE_BYTES + 1)
            if len(data) > MAX_SOURCE_BYTES:
                continue
            source = importlib.util.decode_source(data)
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        found = scan(source, path.name)
        if (source_map := notebooks.get(path.name)) is not None:
            found = [
                ReviewMark(source_map.notebook, m.line, f"{m.reason} ({one_line(source_map.where(m.line), SHOWN)})")
                for m in found
            ]
        marks += found
    return tuple(marks)
