"""The tamper scan (grader/instructor/tamper_scan.py): every primitive a forgery needs is marked with its
line, the forgeries of hostile.py are marked, and no honest code is: the reference solutions, the stubs,
every correct alternative and named mistake of tests/, and the idioms a good engineer writes."""

from __future__ import annotations

import builtins
import keyword
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from variants import materialize, variant_params

from grader.catalog import Catalog, load_catalog
from grader.grading import ExerciseFiles
from grader.instructor import tamper_scan
from grader.instructor.tamper_scan import MAX_MARKS, ReviewMark, scan, scan_files
from grader.notebook_source import CellSpan, SourceMap
from grader.student_files import MAX_SOURCE_BYTES
from security.hostile import ATTACKS

REPO = Path(__file__).resolve().parents[2]
CATALOG: Catalog = load_catalog(REPO)
HERE = "# <-"  # ends the line a case expects its mark on


def _marks_on(source: str) -> tuple[int, list[str]]:
    """The line marked HERE and the reasons of the marks on it."""
    source = textwrap.dedent(source)
    line = next(i for i, text in enumerate(source.splitlines(), 1) if text.endswith(HERE))
    return line, [m.reason for m in scan(source, "ex01_process_group.py") if m.line == line]


# --- honest code ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("exercise", CATALOG.exercises, ids=lambda e: e.id)
def test_every_reference_solution_and_stub_scans_clean(exercise) -> None:
    for path in (CATALOG.solution_path(exercise), CATALOG.stub_path(exercise)):
        assert scan(path.read_text(), path.name) == [], path


@pytest.mark.parametrize(
    ("exercise_id", "variant"), variant_params("alternatives", "alternative") + variant_params("mistakes", "mistake")
)
def test_every_alternative_and_named_mistake_scans_clean(tmp_path: Path, exercise_id: str, variant: dict) -> None:
    """Correct code in another idiom, and honest code with a named mistake: a mark there would accuse a student."""
    path = materialize(CATALOG.get(exercise_id).file, variant, tmp_path)
    assert scan(path.read_text(), path.name) == []


IDIOMS = {
    "environment": """
        import os
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ.setdefault("MASTER_PORT", "29500")
        rank = int(os.environ.get("RANK", "0"))
    """,
    "torch_settings": """
        import torch
        torch.manual_seed(0)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch._dynamo.config.suppress_errors = True
        torch._inductor.config.fallback_random = True
    """,
    "process_group_and_hooks": """
        import torch
        import torch.distributed as dist

        def train(model, hook, optimizer):
            dist.init_process_group("gloo", rank=0, world_size=1)
            model.register_forward_hook(hook)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            all_reduce = dist.all_reduce
            dist.destroy_process_group()
    """,
    "setattr_on_own_objects": """
        import torch

        class Config:
            def __init__(self, **values):
                for key, value in values.items():
                    setattr(self, key, value)

        model = torch.nn.Linear(2, 2)
        setattr(model, "scale", 2.0)
        model.bias = None
        delattr(model, "scale")
        model.__dict__["cache"] = {}
    """,
    "descriptors_opened_here": """
        import os
        import sys
        import tempfile

        r, w = os.pipe()
        os.write(w, b"x")
        log_fd = os.open("/tmp/log", os.O_WRONLY | os.O_CREAT)

        def save(data):
            fd, path = tempfile.mkstemp()
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                os.fsync(handle.fileno())
            os.write(log_fd, b"saved")

        class Sink:
            def __init__(self, path):
                self.fd = os.open(path, os.O_WRONLY)

            def put(self, data):
                os.write(self.fd, data)

        os.write(2, b"to stderr")
        os.write(sys.stdout.fileno(), b"to stdout")
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        with open("notes.txt", "w") as notes:
            notes.write("hi")
    """,
    "gc_and_sys_modules_reads": """
        import gc
        import sys
        gc.collect()
        gc.disable()
        if "torch" in sys.modules and "numpy" not in sys.modules:
            torch_module = sys.modules["torch"]
        this = sys.modules[__name__]
        setattr(sys.modules[__name__], "READY", True)
        maybe = sys.modules.get("torch")
    """,
    "quiet_ranks": """
        import os
        import sys
        if int(os.environ.get("RANK", "0")) != 0:
            sys.stdout = open(os.devnull, "w")
            sys.stderr = sys.stdout
    """,
    "imports_by_literal_name": """
        import importlib
        path = __import__("pathlib").Path("x")
        __import__("os").replace("a", "b")
        dist = importlib.import_module("torch.distributed")
    """,
    "compile_and_eval_that_are_not_the_builtins": """
        import re
        import torch
        from torch import compile

        pattern = re.compile("a+")
        model = torch.compile(torch.nn.Linear(2, 2))
        model = compile(model)
        value = eval("1 + 2")
        exec("total = 1 + 2")
    """,
    "inspect_and_traceback_that_reach_no_frame": """
        import inspect
        import traceback
        signature = inspect.signature(print)
        traceback.print_exc()
    """,
}


@pytest.mark.parametrize("idiom", IDIOMS)
def test_the_idioms_a_good_engineer_writes_are_not_marked(idiom: str) -> None:
    assert scan(textwrap.dedent(IDIOMS[idiom]), "ex01_process_group.py") == []


# --- each primitive ------------------------------------------------------------------------------------

PRIMITIVES = [
    # the grader's modules
    ("import grader.engine.rank_runtime  # <-", "imports grader.engine.rank_runtime, a module of the grader's own"),
    ("from grader.engine import wire  # <-", "imports grader.engine, a module of the grader's own"),
    ("wire = __import__('grader.engine.wire')  # <-", "imports grader.engine.wire"),
    ("import importlib\nrank = importlib.import_module('grader.rank')  # <-", "imports grader.rank"),
    ("name = 'grader'\nmodule = __import__(name)  # <-", "__import__() of a module name computed at run time"),
    ("import importlib\nm = importlib.import_module('gra' + 'der')  # <-", "import_module() of a module name computed"),
    # sys.modules
    ("import sys\nwire = sys.modules['grader.engine.wire']  # <-", "looks up grader.engine.wire, a module"),
    ("import sys\nloaded = 'grader.engine' in sys.modules  # <-", "looks up grader.engine"),
    ("import sys\nsys.modules['torch.distributed'] = None  # <-", "writes sys.modules"),
    ("from sys import modules\ndel modules['torch']  # <-", "writes sys.modules"),
    ("import sys\nsys.modules.pop('torch')  # <-", "changes sys.modules (.pop)"),
    ("import sys\nfor module in list(sys.modules.values()):  # <-\n    pass", "reads sys.modules as a whole"),
    ("import sys\nname = 'torch'\nmodule = sys.modules[name]  # <-", "a name computed at run time (name)"),
    ("import sys\nsys.meta_path.insert(0, object())  # <-", "uses sys.meta_path"),
    # frames
    ("import sys\nframe = sys._getframe(1)  # <-", "uses sys._getframe"),
    ("import inspect\nframe = inspect.currentframe()  # <-", "uses inspect.currentframe"),
    ("import inspect\nstack = inspect.stack()  # <-", "uses inspect.stack"),
    ("from sys import _getframe as here\nframe = here()  # <-", "uses sys._getframe"),
    ("import sys\nframe = getattr(sys, '_getframe')()  # <-", "uses sys._getframe"),
    ("def up(frame):\n    return frame.f_back  # <-", "reads .f_back"),
    ("def peek(frame):\n    return frame.f_locals['report_fd']  # <-", "reads .f_locals"),
    ("def peek(frame):\n    return frame.f_globals  # <-", "reads .f_globals"),
    ("def peek(tb):\n    return tb.tb_frame  # <-", "reads .tb_frame"),
    ("def up(frame):\n    return getattr(frame, 'f_back')  # <-", "reads .f_back"),
    ("import sys\nsys.settrace(print)  # <-", "installs a trace or profile function (sys.settrace)"),
    # a function's closure and globals: a hook the grader registered holds the lists it fills
    (
        "def inside(optimizer):\n    return optimizer._optimizer_step_pre_hooks[0].__closure__  # <-",
        "reads .__closure__",
    ),
    ("def inside(hook):\n    return hook.__closure__[0].cell_contents  # <-", "reads .__closure__"),
    ("def inside(cell):\n    cell.cell_contents.clear()  # <-", "reads .cell_contents"),
    ("def inside(hook):\n    return hook.__globals__  # <-", "reads .__globals__"),
    ("def inside(hook):\n    return getattr(hook, '__closure__')  # <-", "reads .__closure__"),
    # gc
    ("import gc\nobjects = gc.get_objects()  # <-", "uses gc.get_objects"),
    ("import gc\nholders = gc.get_referrers(print)  # <-", "uses gc.get_referrers"),
    ("from gc import get_referents\nparts = get_referents(1)  # <-", "uses gc.get_referents"),
    # ctypes
    ("import ctypes  # <-", "imports ctypes, which reads and writes any memory"),
    ("from ctypes import pythonapi  # <-", "imports ctypes"),
    ("c = __import__('ctypes')  # <-", "imports ctypes"),
    # raw descriptors
    ("import os\nos.write(7, b'x')  # <-", "os.write() on descriptor 7, which this code did not open"),
    ("import os\nfor fd in range(3, 64):\n    os.write(fd, b'x')  # <-", "os.write() on descriptor fd"),
    ("import os\ndef send(fd):\n    os.write(fd, b'x')  # <-", "os.write() on descriptor fd"),
    ("import os as o\no.write(3, b'x')  # <-", "os.write() on descriptor 3"),
    ("import os\nchannel = os.fdopen(5, 'wb')  # <-", "os.fdopen() on descriptor 5"),
    ("import os\nos.dup2(os.open('/dev/null', os.O_WRONLY), 9)  # <-", "os.dup2() on descriptor 9"),
    ("channel = open(4, 'wb')  # <-", "open() of descriptor 4, an inherited one"),
    ("import io\nchannel = io.FileIO(3, 'w')  # <-", "io.FileIO() of descriptor 3"),
    # modules the submission does not own
    (
        "import grader.engine.rank_runtime\ngrader.engine.rank_runtime.X = 1  # <-",
        "rebinds grader.engine.rank_runtime.X: grader.engine.rank_runtime is imported",
    ),
    ("import torch.distributed as dist\ndist.all_reduce = print  # <-", "rebinds torch.distributed.all_reduce"),
    ("import torch\nsetattr(torch.distributed, 'all_reduce', print)  # <-", "rebinds torch.distributed.all_reduce"),
    ("import torch\nname = 'x'\nsetattr(torch.distributed, name, 1)  # <-", "rebinds an attribute of torch.dist"),
    ("import torch.distributed as dist\ndel dist.barrier  # <-", "rebinds torch.distributed.barrier"),
    ("import torch.distributed as dist\nd = dist\nd.broadcast = print  # <-", "rebinds torch.distributed.broadcast"),
    ("from torch import nn\nnn.Linear.forward = print  # <-", "rebinds torch.nn.Linear.forward"),
    ("import torch\ntorch.distributed.__dict__['send'] = print  # <-", "rebinds torch.distributed.send"),
    ("import torch\nvars(torch.distributed).update(send=print)  # <-", "rebinds an attribute of torch.distributed"),
    ("import builtins\nbuiltins.print = len  # <-", "rebinds builtins.print, a builtin every module"),
    ("__builtins__['print'] = len  # <-", "rebinds builtins.print, a builtin every module"),
    # code from strings
    ("code = 'x = 1'\nexec(code)  # <-", "exec() of a string built at run time (code)"),
    ("value = eval(input())  # <-", "eval() of a string built at run time"),
    ("code = compile(open('f').read(), 'f', 'exec')  # <-", "compile() of a string built at run time"),
    ("exec('import grader')  # <-", "imports grader, a module of the grader's own"),
    ("exec('''\nimport sys\nframe = sys._getframe()  # <-\n''')", "uses sys._getframe"),
]


@pytest.mark.parametrize(("source", "reason"), PRIMITIVES, ids=[reason for _, reason in PRIMITIVES])
def test_each_primitive_is_marked_on_its_line(source: str, reason: str) -> None:
    line, reasons = _marks_on(source)
    assert any(reason in r for r in reasons), (line, reasons, scan(source, "ex01_process_group.py"))


IDENTIFIERS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name) and not hasattr(builtins, name)
)
MARKED = [
    ("sys", "{a}._getframe()"),
    ("gc", "{a}.get_objects()"),
    ("os", "{a}.write(5, b'x')"),
    ("torch.distributed", "{a}.all_reduce = None"),
    ("sys", "{a}.modules['torch'] = None"),
    ("builtins", "{a}.print = None"),
    ("inspect", "{a}.currentframe()"),
]
UNMARKED = [
    ("os", "{a}.environ['RANK'] = '0'"),
    ("torch", "{a}.manual_seed(0)"),
    ("gc", "{a}.collect()"),
    ("sys", "ok = 'torch' in {a}.modules"),
    ("torch.distributed", "{a}.all_reduce(None)"),
]


def _nested(module: str, alias: str, statement: str, depth: int) -> str:
    """`import module as alias`, then `statement` inside `depth` nested functions, marked HERE."""
    lines = [f"import {module} as {alias}"]
    for level in range(depth):
        lines.append("    " * level + f"def f{level}():")
    lines.append("    " * depth + statement.format(a=alias) + "  " + HERE)
    return "\n".join(lines)


@settings(max_examples=60, deadline=None)
@given(alias=IDENTIFIERS, depth=st.integers(0, 4), case=st.sampled_from(MARKED), honest=st.sampled_from(UNMARKED))
def test_a_primitive_is_marked_whatever_its_alias_and_depth_and_an_idiom_never(alias, depth, case, honest) -> None:
    _, reasons = _marks_on(_nested(case[0], alias, case[1], depth))
    assert reasons
    assert _marks_on(_nested(honest[0], alias, honest[1], depth))[1] == []


# --- the forgeries of hostile.py -----------------------------------------------------------------------

CONTEXT = {"tmp": "/tmp/x", "course": "/course", "out": "/out", "marker": "m", "marker_number": "17", "port": "1"}


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_the_forgeries_of_hostile_py_are_marked(tmp_path: Path, attack) -> None:
    """An attack that uses a forgery's primitive is marked; one that goes only after the machine or the
    files, which the sandbox stops, is not. Each attack's file compiles: one that cannot be imported tests nothing."""
    attack.write(tmp_path / attack.name, CONTEXT)
    source = (tmp_path / attack.name / attack.file).read_text()
    compile(source, attack.file, "exec")
    assert bool(scan(source, attack.file)) == attack.marked, scan(source, attack.file)


def test_the_forged_encoder_is_marked_at_each_primitive(tmp_path: Path) -> None:
    (attack,) = [a for a in ATTACKS if a.name == "forges_facts_by_patching_the_encoder"]
    attack.write(tmp_path / "s", CONTEXT)
    source = (tmp_path / "s" / attack.file).read_text()
    marks = scan(source, attack.file)
    lines = source.splitlines()
    said = {(lines[m.line - 1].strip(), m.reason.split(":")[0].split(",")[0]) for m in marks}
    assert said >= {
        ("import grader.engine.wire as _w", "imports grader.engine.wire"),
        ("frame = _y._getframe()", "uses sys._getframe"),
        ("frame = frame.f_back", "reads .f_back"),
        ("_w.encode = _forged", "rebinds grader.engine.wire.encode"),
    }, said


# --- what the scan cannot read -------------------------------------------------------------------------


def test_source_python_cannot_parse_gets_no_mark_and_no_crash() -> None:
    """It cannot run either: the grading says why (grader/student_files.py)."""
    for source in ("def def f(:\n", "x = 1\0", "x = (" * 300 + ")" * 300, "x = " + "+".join(["a"] * 100_000)):
        assert scan(source, "ex01_process_group.py") == []


def test_source_that_parses_but_is_too_deep_to_follow_is_one_mark_that_says_so() -> None:
    source = "import sys\nx = " + ".".join(["sys"] * 2_000) + "\n"
    compile(source, "ex01_process_group.py", "exec")
    (mark,) = scan(source, "ex01_process_group.py")
    assert mark == ReviewMark("ex01_process_group.py", 1, "could not be scanned (RecursionError): review it by hand")


def test_a_defect_of_the_scan_is_one_mark_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self) -> list[ReviewMark]:
        raise KeyError("a defect")

    monkeypatch.setattr(tamper_scan._Scan, "run", broken)
    assert [m.reason for m in scan("import os\n", "f.py")] == ["could not be scanned (KeyError): review it by hand"]


@given(st.text(max_size=300))
@settings(max_examples=200, deadline=None)
def test_any_text_scans_to_marks_or_none_and_never_raises(text: str) -> None:
    assert all(isinstance(m, ReviewMark) for m in scan(text, "f.py"))


def test_a_file_full_of_primitives_is_cut_at_the_limit_and_says_so() -> None:
    source = "import sys\n" + "sys._getframe()\n" * 500
    marks = scan(source, "f.py")
    assert len(marks) == MAX_MARKS
    assert marks[-1] == ReviewMark("f.py", MAX_MARKS + 1, f"and {500 - MAX_MARKS + 1} more marks from here on")


def test_the_student_s_text_in_a_reason_is_one_short_line() -> None:
    (mark,) = scan("import os\nos.write(\n    7 if True else '\\x1b[2J' + 'x' * 500,\n    b'x')\n", "f.py")
    assert "\n" not in mark.reason and "\x1b" not in mark.reason and len(mark.reason) < 250


# --- the files of a submission -------------------------------------------------------------------------


def test_every_graded_file_is_scanned_and_a_notebook_s_marks_name_its_cell(tmp_path: Path) -> None:
    (tmp_path / "ex01_process_group.py").write_text("import os\n\nos.write(9, b'x')\n")
    (tmp_path / "ex02_data_sharding.py").write_text("# extracted\nimport ctypes\n")
    (tmp_path / "ex03_train_ddp.py").write_bytes(b"\xff\xfe not utf-8")  # cannot be imported: nothing runs
    (tmp_path / "ex04_launch.py").write_text("import ctypes\n" + "#" * MAX_SOURCE_BYTES)  # over the limit: not graded
    notebook = SourceMap("mine.ipynb", "ex02_data_sharding.py", [CellSpan("cell 4", 2, 1)])
    files = ExerciseFiles(tmp_path, source_maps={"ex02_data_sharding": notebook})
    assert [str(m) for m in scan_files(files)] == [
        "ex01_process_group.py:3: os.write() on descriptor 9, which this code did not open: "
        "an inherited descriptor is the grader's channel",
        "mine.ipynb:2: imports ctypes, which reads and writes any memory of the process (cell 4, line 1)",
    ]
