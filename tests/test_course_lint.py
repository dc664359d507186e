"""`grader lint-course`: each authoring mistake is named with its file and line, and the shipped course has none.

Each test breaks one name in a private copy of the course (its grader package included, since the
lint reads the copy's checks) and expects the problem at the line where the broken name is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO
from instructor import support

from grader import course_lint_hints
from grader.catalog import CatalogError, load_catalog
from grader.cli import main
from grader.course_lint import lint
from grader.judge import runner
from grader.judge.api import CheckContext
from grader.judge.names import HintName

CATALOG = "exercises/catalog.toml"
EX01_CHECKS = "grader/checks/ex01_process_group/checks.py"


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = support.course_copy(tmp_path / "course")
    monkeypatch.setenv("GRADER_COURSE", str(root))
    return root


def _edit(path: Path, old: str, new: str) -> int:
    """Replace the first `old` in the file; returns the 1-based line where it was."""
    text = path.read_text()
    assert old in text, f"{old!r} is not in {path}"
    line = text[: text.index(old)].count("\n") + 1
    path.write_text(text.replace(old, new, 1))
    return line


def _lint(root: Path) -> list[str]:
    problems, summary = lint(root)
    assert problems, f"no problem found: {summary}"
    return problems


def test_the_shipped_course_passes(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert lint(REPO)[0] == []
    monkeypatch.setenv("GRADER_COURSE", str(REPO))
    assert main(["lint-course"]) == 0
    out = capsys.readouterr().out
    exercises = len(load_catalog(REPO).exercises)
    assert out.startswith(f"course OK: {exercises} exercises") and out.count("\n") == 1


def test_a_misspelt_check_name_in_the_catalog(course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _edit(course / CATALOG, 'name = "joins_group"', 'name = "joins_grup"')
    registered = (course / EX01_CHECKS).read_text().split("\n").index('@check("joins_group")') + 1
    problems = _lint(course)
    assert f"{CATALOG}:{line}: check 'joins_grup' of ex01_process_group is registered by no @check" in problems[1]
    assert problems[0].startswith(
        f"{EX01_CHECKS}:{registered}: check 'joins_group' is not a check of "
        "ex01_process_group in the catalog (its checks: joins_grup, "
    )
    assert main(["lint-course"]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == problems and "2 problem(s)" in captured.err and "Traceback" not in captured.err


def test_a_misspelt_hint_name_in_a_checks_module(course: Path) -> None:
    line = _edit(course / EX01_CHECKS, 'HintName("local_rank_gpu")', 'HintName("local_rank_gpo")')
    assert _lint(course) == [
        f"{EX01_CHECKS}:{line}: hint 'local_rank_gpo' is not a hint of ex01_process_group "
        "(its hints: launcher_sets_address, backend_choice, local_rank_gpu, destroy_group)"
    ]


def test_a_misspelt_hint_name_in_a_hint_table(course: Path) -> None:
    checks = "grader/checks/ex03_train_ddp/checks.py"
    line = _edit(course / checks, 'HintName("mean_loss"),', 'HintName("mean_los"),')
    (problem,) = _lint(course)
    assert problem.startswith(f"{checks}:{line}: hint 'mean_los' is not a hint of ex03_train_ddp (its hints: ")


def test_a_hint_by_number(course: Path) -> None:
    line = _edit(course / EX01_CHECKS, 'hint=HintName("local_rank_gpu")', "hint=3")
    (problem,) = _lint(course)
    assert problem == f'{EX01_CHECKS}:{line}: a hint is named by HintName("..."), not 3 (3)'


EX05_CHECKS = "grader/checks/ex05_no_sync/checks.py"
EX14_CHECKS = "grader/checks/ex14_tensor_parallel/checks.py"
EX14_HINTS = "(its hints: slices, f_and_g, bias_once, column_then_row, parallelize_module)"


@pytest.mark.parametrize(
    ("checks", "old", "new", "exercise"),
    [
        # in a dict (a hypothesis' hint), in a conditional, as a positional argument: all unseen by the lint before
        (
            EX05_CHECKS,
            'Cause("divided_by_k_twice"): HintName("divide_loss_by_k")',
            'Cause("divided_by_k_twice"): HintName("divide_loss_by_kk")',
            "ex05_no_sync",
        ),
        (EX14_CHECKS, 'hint=HintName("f_and_g") if', 'hint=HintName("f_and_gg") if', "ex14_tensor_parallel"),
        (EX14_CHECKS, 'measured, HintName("f_and_g"))', 'measured, HintName("f_and_gg"))', "ex14_tensor_parallel"),
    ],
    ids=["dict", "conditional", "positional"],
)
def test_a_misspelt_hint_name_wherever_it_is_written(
    course: Path, checks: str, old: str, new: str, exercise: str
) -> None:
    line = _edit(course / checks, old, new)
    (problem,) = _lint(course)
    misspelt = new.split('HintName("')[1].split('"')[0]
    assert problem.startswith(f"{checks}:{line}: hint {misspelt!r} is not a hint of {exercise} (its hints: ")


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            'hint=HintName("local_rank_gpu")',
            'hint="local_rank_gpu"',
            "a hint is named by HintName(\"...\"), not 'local_rank_gpu'",
        ),
        (
            'hint=HintName("local_rank_gpu")',
            'hint=None if ctx else "local_rank_gpu"',
            "a hint is named by HintName(\"...\"), not 'local_rank_gpu' (None if ctx else 'local_rank_gpu')",
        ),
        (
            'hint=HintName("local_rank_gpu")',
            "hint=HintName(ctx.check)",
            "HintName(ctx.check) does not name its HintName by a string literal",
        ),
    ],
    ids=["keyword", "conditional", "not-a-literal"],
)
def test_a_hint_the_lint_cannot_read(course: Path, old: str, new: str, said: str) -> None:
    line = _edit(course / EX01_CHECKS, old, new)
    (problem,) = _lint(course)
    assert problem.startswith(f"{EX01_CHECKS}:{line}: {said}"), problem


VOCABULARY = "grader/judge/causes.toml"
UNKNOWN = "is not in the course's vocabulary (grader/judge/causes.toml)"


def test_a_cause_not_in_the_vocabulary(course: Path) -> None:
    checks = "grader/checks/ex17_dcp_reshard/checks.py"
    line = _edit(course / checks, 'Cause("path_per_rank")', 'Cause("path_per_rnk")')
    entry = (course / VOCABULARY).read_text().split("\n").index(
        next(x for x in (course / VOCABULARY).read_text().split("\n") if x.startswith("path_per_rank ="))
    ) + 1
    assert _lint(course) == [
        f"{checks}:{line}: cause 'path_per_rnk' {UNKNOWN}",
        f"{VOCABULARY}:{entry}: cause 'path_per_rank' is named nowhere in the course",
    ]


def test_a_bare_cause_and_a_hypothesis_cause_not_in_the_vocabulary(course: Path) -> None:
    checks = "grader/checks/ex17_dcp_reshard/checks.py"
    # ex17 names path_per_rank through proven=: a bare cause= written in its place
    old = '        hint=HintName("every_rank_saves"),\n        proven=proven,\n'
    line = (
        _edit(course / checks, old, '        hint=HintName("every_rank_saves"),\n        cause="path_per_rank",\n') + 1
    )
    toml = _edit(course / EX03_HYPOTHESES, 'cause = "adamw"', 'cause = "adam_w"')
    problems = _lint(course)
    assert f"{EX03_HYPOTHESES}:{toml}: cause 'adam_w' {UNKNOWN}" in problems
    assert f"{checks}:{line}: a cause is named by Cause(\"...\"), not 'path_per_rank' ('path_per_rank')" in problems


def test_a_vocabulary_entry_nothing_names(course: Path) -> None:
    text = (course / VOCABULARY).read_text()
    (course / VOCABULARY).write_text(text + 'never_named = "a cause no check proves"\n')
    assert _lint(course) == [
        f"{VOCABULARY}:{text.count(chr(10)) + 1}: cause 'never_named' is named nowhere in the course"
    ]


def test_a_misspelt_worker(course: Path) -> None:
    line = _edit(course / EX01_CHECKS, "ctx.run(JOIN_AND_LEAVE.name", 'ctx.run("join_and_leav"')
    assert _lint(course) == [
        f"{EX01_CHECKS}:{line}: worker 'join_and_leav' is not a function of "
        "grader/checks/ex01_process_group/workers.py "
        "(grader.checks.ex01_process_group.workers:join_and_leav)"
    ]


def test_a_misspelt_worker_in_a_schema(course: Path) -> None:
    facts = "grader/checks/ex01_process_group/facts.py"
    line = _edit(course / facts, 'Worker("join_and_leave"', 'Worker("join_and_leav"')
    assert _lint(course) == [
        f"{facts}:{line}: worker 'join_and_leav' is not a function of "
        "grader/checks/ex01_process_group/workers.py "
        "(grader.checks.ex01_process_group.workers:join_and_leav)"
    ]


def test_a_stub_missing_a_function(course: Path) -> None:
    _edit(course / "exercises/ex01_process_group.py", "def cleanup_ddp(", "def cleanup(")
    functions = (course / CATALOG).read_text().split("\n").index(
        'functions = ["setup_ddp(rank, world_size, backend=None)", "cleanup_ddp()"]'
    ) + 1
    assert _lint(course) == [
        "exercises/ex01_process_group.py: ex01_process_group.py defines no function cleanup_ddp() "
        "(keep the stub's name and parameters) "
        f"({CATALOG}:{functions} lists setup_ddp(rank, world_size, backend=None), cleanup_ddp())"
    ]


def test_a_solution_with_other_parameters(course: Path) -> None:
    line = _edit(course / "solutions/ex01_process_group.py", "def cleanup_ddp()", "def cleanup_ddp(rank)")
    (problem,) = _lint(course)
    assert problem.startswith(
        f"solutions/ex01_process_group.py:{line}: cleanup_ddp in ex01_process_group.py takes "
        "(rank) but the grader calls it as cleanup_ddp()"
    )


def test_a_hidden_check_in_the_shipped_module(course: Path) -> None:
    hidden = course / "grader/checks/ex02_data_sharding/hidden.py"
    name = next(spec.name for spec in load_catalog(course).get("ex02").checks if spec.visibility == "hidden")
    checks = course / "grader/checks/ex02_data_sharding/checks.py"
    checks.write_text(checks.read_text() + f'\n\n@check("{name}")\ndef leaked(ctx):\n    pass\n')
    hidden.write_text(hidden.read_text().replace(f'@check("{name}")', '@check("moved")'))
    problems = _lint(course)
    assert any(
        p.startswith("grader/checks/ex02_data_sharding/checks.py:") and f"hidden check {name!r} is in checks.py" in p
        for p in problems
    ), problems


def test_a_public_check_in_the_hidden_module(course: Path) -> None:
    checks = course / "grader/checks/ex02_data_sharding/checks.py"
    hidden = course / "grader/checks/ex02_data_sharding/hidden.py"
    _edit(checks, '@check("shards_cover_dataset")', '@check("renamed")')
    hidden.write_text(hidden.read_text() + '\n\n@check("shards_cover_dataset")\ndef moved(ctx):\n    pass\n')
    line = hidden.read_text().split("\n").index('@check("shards_cover_dataset")') + 1
    assert (
        f"grader/checks/ex02_data_sharding/hidden.py:{line}: public check 'shards_cover_dataset' is in hidden.py, "
        "which the student copy leaves out: move it to checks.py beside it" in _lint(course)
    )


def test_a_checks_module_that_does_not_parse(course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (course / EX01_CHECKS).write_text("def broken(:\n")
    assert _lint(course) == [f"{EX01_CHECKS}:1: syntax error: invalid syntax"]
    assert main(["lint-course"]) == 1 and "Traceback" not in capsys.readouterr().err


def test_a_missing_workers_module(course: Path) -> None:
    (course / "grader/checks/ex01_process_group/workers.py").unlink()
    line = (course / CATALOG).read_text().split("\n").index('checks = "grader.checks.ex01_process_group"') + 1
    assert _lint(course) == [
        f"{CATALOG}:{line}: ex01_process_group's checks package grader.checks.ex01_process_group "
        "has no workers.py (grader/checks/ex01_process_group/workers.py)"
    ]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("format = 1  #", "#", f"{CATALOG}:1: no `format = 1` line at the top"),
        ("format = 1  #", "format = 2  #", f"{CATALOG}:11: format 2 is unknown to this grader, which reads format 1"),
    ],
)
def test_a_catalog_without_a_known_format(
    course: Path, old: str, new: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _edit(course / CATALOG, old, new)
    (problem,) = _lint(course)
    assert problem.startswith(expected)
    with pytest.raises(CatalogError, match="format"):
        load_catalog(course)
    assert main(["lint-course"]) == 1 and "Traceback" not in capsys.readouterr().err


def test_hints_are_named_uniquely(course: Path) -> None:
    _edit(course / CATALOG, '{ name = "backend_choice"', '{ name = "launcher_sets_address"')
    with pytest.raises(CatalogError, match="hint name 'launcher_sets_address' is used twice"):
        load_catalog(course)
    _edit(course / CATALOG, '{ name = "launcher_sets_address"', '{ nom = "x"')
    with pytest.raises(CatalogError, match="unknown field"):
        load_catalog(course)


def test_apis_must_be_dotted_torch_names(course: Path) -> None:
    _edit(course / CATALOG, '    "torch.distributed.fsdp.fully_shard",', '    "fully_shard",')
    with pytest.raises(CatalogError, match="apis must be a list of dotted torch names"):
        load_catalog(course)


def test_an_unknown_hint_name_at_grading_is_a_failure_without_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lint is where authors learn of a misspelt hint: a student still sees the failure, never an error."""
    catalog = load_catalog(REPO)
    exercise = catalog.get("ex01")

    def misspelt(ctx: CheckContext) -> None:
        raise ctx.fail("the group was not formed", hint=HintName("no_such_hint"))

    def named(ctx: CheckContext) -> None:
        raise ctx.fail("the group was not formed", hint=HintName("local_rank_gpu"))

    monkeypatch.setattr(runner, "load_checks", lambda _: {"joins_group": misspelt, "cleans_up": named})
    options = runner.GradeOptions(world_sizes=(2,), only=frozenset({"joins_group", "cleans_up"}))
    no_engine = None  # the checks above start no rank
    results = runner.grade_exercise(no_engine, exercise, catalog.solution_path(exercise), options)  # type: ignore
    assert [(r.check, r.status, r.message, r.hint_number) for r in results] == [
        ("joins_group", "failed", "the group was not formed", None),
        ("cleans_up", "failed", "the group was not formed", 3),
    ]


EX03_HYPOTHESES = "grader/checks/ex03_train_ddp/hypotheses.toml"


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            'hint = "mean_loss"',
            'hint = "mean_los"',
            "hypothesis 'loss_summed': hint 'mean_los' is not a hint of this exercise",
        ),
        ('{ summed_in = "W" }', '{ sumed_in = "W" }', "unknown knob 'sumed_in'"),
        ('{ loss_scale = "1/b" }', '{ loss_scale = "1/B" }', "names ['B'], not numbers of the run"),
        ('mistake = { momentum = "fit" }\nfitted = true', 'mistake = { momentum = "fit" }', 'one knob = "fit"'),
        ("the batch size (b = {b})", "the batch size (b = {batch})", "says names 'batch'"),
        ('cause = "divided_by_b"', 'cause = "loss_summed"', "hypothesis 'loss_summed': named twice"),
        ("[[hypothesis]]\ncause", "[[hypothesis]]\ncauses", "needs a cause and a says"),
    ],
)
def test_a_broken_hypothesis(course: Path, old: str, new: str, said: str) -> None:
    _edit(course / EX03_HYPOTHESES, old, new)
    problems = _lint(course)
    assert any(p.startswith(EX03_HYPOTHESES) and said in p for p in problems), problems


EX13_HYPOTHESES = "grader/checks/ex13_zero1/hypotheses.toml"
EX14_HYPOTHESES = "grader/checks/ex14_tensor_parallel/hypotheses.toml"


@pytest.mark.parametrize(
    ("path", "old", "new", "said"),
    [
        (
            EX13_HYPOTHESES,
            'mistake = { reduce = "sum" }',
            'mistake = { reduce = "summ" }',
            "reduce = 'summ', not one of",
        ),
        (EX13_HYPOTHESES, 'mistake = { send = "none" }', 'mistake = { sent = "none" }', "unknown knob 'sent'"),
        (EX13_HYPOTHESES, 'mistake = { lr_scale = "W" }', 'mistake = { lr_scale = "b" }', "names ['b'], not numbers"),
        (EX13_HYPOTHESES, 'numbers = ["W"]', 'numbers = ["W"]\nbackend = "x"', "[replay]: unknown field 'backend'"),
        (EX14_HYPOTHESES, "{W_1}·b2", "{W_2}·b2", "says names 'W_2'"),
        (
            EX14_HYPOTHESES,
            'bias = ["after", "every_rank", "every_rank_over_W", "rank0", "after_over_W", "rank0_after"]',
            'bias = "word"',
            "knob 'bias' must be",
        ),
    ],
    ids=["word", "knob", "number", "replay-field", "sentence", "kind"],
)
def test_a_broken_exercise_replay(course: Path, path: str, old: str, new: str, said: str) -> None:
    """A hypotheses.toml whose [replay] table declares its own worker's knobs is held to them, not the shared loop's."""
    _edit(course / path, old, new)
    problems = _lint(course)
    assert any(p.startswith(path) and said in p for p in problems), problems


def test_the_judges_knobs_are_the_replays() -> None:
    """The lint knows the knobs without importing the rank side (torch): the two lists must agree."""
    from grader.judge.replay import KNOBS
    from grader.rank.training import MISTAKE_KNOBS

    assert set(MISTAKE_KNOBS) == KNOBS


# --- hints: the ladder (grader/course_lint_hints.py) ------------------------------------------------------------

EX01_CODE = "`if backend is None: backend = 'nccl' if torch.cuda.is_available() else 'gloo'`"


def _hint_text(course: Path, exercise: str, name: str) -> str:
    return next(hint.text for hint in load_catalog(course).get(exercise).hints if hint.name == name)


def test_a_hint_mostly_code_before_the_last_rung(course: Path) -> None:
    old = _hint_text(course, "ex01", "backend_choice")
    line = _edit(course / CATALOG, old, f"Pick the backend: {EX01_CODE}.")
    assert _lint(course) == [
        f"{CATALOG}:{line}: hint 2 of ex01_process_group (backend_choice) is 79% code, before the last rung: say "
        "the idea, and the API's contract, in words there; only the last hint may sketch the code"
    ]


def test_the_last_rung_may_be_a_code_sketch(course: Path) -> None:
    """The same sketch as the last hint of ex01 passes: that is where the ladder ends."""
    _edit(course / CATALOG, _hint_text(course, "ex01", "destroy_group"), f"Pick the backend: {EX01_CODE}.")
    assert lint(course)[0] == []


def test_two_code_sketches(course: Path) -> None:
    """A hint that is mostly prose but writes a solution's statements out is a sketch too: one per exercise."""
    statements = "`sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)`"
    loader = "`loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)`"
    old = _hint_text(course, "ex03", "data_sampler")
    line = _edit(course / CATALOG, old, f"{old} In code: {statements}, then {loader}.")
    (problem,) = _lint(course)
    assert problem.startswith(
        f"{CATALOG}:{line + 1}: ex03_train_ddp has 2 code sketches, hints 6 (data_sampler: 204 characters"
    )
    assert "7 (optimizer: 112 characters of code): keep one, the last" in problem
    assert "% code" not in problem  # hint 6 is still mostly prose: only the count of sketches is wrong


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("no code at all", 0),
        ("call `dist.barrier()` then `x`", 15),
        ("a block:\n```python\nx = 1\ny = 2\n```\nand after it `z`", len("python\nx = 1\ny = 2\n") + 1),
    ],
)
def test_what_counts_as_code(text: str, code: int) -> None:
    assert course_lint_hints.code_chars(text) == code


# --- hints: the causes each declares ---------------------------------------------------------------------------


def test_a_hypothesis_that_points_at_another_hint_than_the_one_declaring_its_cause(course: Path) -> None:
    _edit(course / EX03_HYPOTHESES, 'hint = "mean_loss"', 'hint = "optimizer"')  # loss_summed's, the first entry
    line = (course / EX03_HYPOTHESES).read_text().split("\n").index('cause = "loss_summed"') + 1
    assert _lint(course) == [
        f"{EX03_HYPOTHESES}:{line}: cause 'loss_summed' points at hint 'optimizer', which does not declare it; "
        "the hint of ex03_train_ddp that declares it: mean_loss"
    ]


EX17_CHECKS = "grader/checks/ex17_dcp_reshard/checks.py"


@pytest.mark.parametrize(
    ("checks", "old", "new", "said"),
    [
        (  # ex17 names its causes through proven= (a pair made at run time): a cause= written beside its hint
            EX17_CHECKS,
            'hint=HintName("async_save"),\n        proven=proven,',
            'hint=HintName("every_rank_saves"),\n        cause=Cause("async_save_not_waited"),',
            "cause 'async_save_not_waited' points at hint 'every_rank_saves'",
        ),
        (  # one condition chooses both: each cause is paired with the hint of its own branch
            EX17_CHECKS,
            'HintName("every_rank_saves") if saving else HintName("shard_then_load"),\n            proven=proven,',
            'HintName("shard_then_load") if saving else HintName("every_rank_saves"),\n'
            '            cause=Cause("save_on_rank0_only") if saving else Cause("load_on_rank0_only"),',
            "cause 'save_on_rank0_only' points at hint 'shard_then_load'",
        ),
        (
            EX05_CHECKS,
            'Cause("never_synchronized"): HintName("no_sync")',
            'Cause("never_synchronized"): HintName("step_per_group")',
            "cause 'never_synchronized' points at hint 'step_per_group'",
        ),
        (
            "grader/checks/ex03_train_ddp/checks.py",
            '            Cause("steps_per_batch"),\n        ),\n        HintName("optimizer")',
            '            Cause("steps_per_batch"),\n        ),\n        HintName("mean_loss")',
            "cause 'no_momentum' points at hint 'mean_loss'",
        ),
        (  # a Finding's cause, proven a line before: the proof its proven= names, with the hint it carries
            EX05_CHECKS,
            '                hint=HintName("no_sync"),\n                proven=never,',
            '                hint=HintName("step_per_group"),\n                proven=never,',
            "cause 'never_synchronized' points at hint 'step_per_group'",
        ),
        (  # one condition chooses both, through the proof's name
            EX17_CHECKS,
            'hint=HintName("every_rank_saves") if saving else HintName("shard_then_load"),\n            proven=proven,',
            'hint=HintName("shard_then_load") if saving else HintName("every_rank_saves"),\n            proven=proven,',
            "cause 'save_on_rank0_only' points at hint 'shard_then_load'",
        ),
    ],
    ids=["keywords", "one-condition", "dict", "dict.fromkeys", "proven-name", "proven-one-condition"],
)
def test_a_cause_written_with_another_hint(course: Path, checks: str, old: str, new: str, said: str) -> None:
    line = _edit(course / checks, old, new) + new[: new.index("HintName(")].count("\n")  # the hint's line
    problems = _lint(course)
    assert any(p.startswith(f"{checks}:{line}: {said}, which does not declare it") for p in problems), problems


def test_a_cause_no_hint_declares(course: Path) -> None:
    _edit(course / CATALOG, ', causes = ["async_save_not_waited"]', "")
    lines = (course / EX17_CHECKS).read_text().split("\n")
    line = lines.index('    proven = structural(Cause("async_save_not_waited"), built, observed)') + 1
    assert _lint(course) == [
        f"{EX17_CHECKS}:{line}: cause 'async_save_not_waited' of ex17_dcp_reshard is declared by none of its hints: "
        f"add it to the causes of the hint that teaches its fix ({CATALOG})"
    ]


def test_a_declared_cause_outside_the_vocabulary(course: Path) -> None:
    line = _edit(course / CATALOG, 'causes = ["async_save_not_waited"]', 'causes = ["async_save_not_waited", "x_y"]')
    assert _lint(course) == [
        f"{CATALOG}:{line}: hint 'async_save' of ex17_dcp_reshard declares cause 'x_y', which is not in the "
        "course's vocabulary (grader/judge/causes.toml)"
    ]


def test_causes_must_be_a_list_of_names(course: Path) -> None:
    _edit(course / CATALOG, 'causes = ["async_save_not_waited"]', 'causes = "async_save_not_waited"')
    with pytest.raises(CatalogError, match="causes must be a list of cause names"):
        load_catalog(course)
