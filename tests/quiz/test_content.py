"""The course banks cover what the exam needs, and the items once found ambiguous stay unambiguous."""

from __future__ import annotations

import pytest

from .support import course_questions

QUESTIONS = {q.id: q for q in course_questions()}


@pytest.mark.parametrize(
    ("qid", "kind", "words"),
    [
        ("accum-batchnorm", "single", ("BatchNorm", "accumulation")),
        ("ring-alpha-beta", "numeric", ("alpha-beta", "latency")),
        ("zero-comm-volume", "numeric", ("ZeRO stage", "reduce-scatter")),
        ("launch-failure-restart", "multiple", ("mp.spawn", "--max-restarts")),
    ],
)
def test_the_topics_the_issue_asked_for_are_covered(qid: str, kind: str, words: tuple[str, ...]) -> None:
    question = QUESTIONS[qid]
    assert question.type == kind and question.pool == "exam"
    assert all(word in question.text for word in words)


def test_the_pipeline_bubble_question_does_not_give_its_formula() -> None:
    text = QUESTIONS["par-pipeline-bubble"].text
    assert "(p - 1)" not in text and "m + p" not in text


def test_rank_questions_do_not_assume_an_order_of_processes() -> None:
    text = QUESTIONS["pg-rank-world"].text.lower()
    assert "third" not in text and "second process" not in text


def test_the_ring_ratio_asks_for_a_ratio_not_how_many_times_more() -> None:
    text = QUESTIONS["ring-naive-ratio"].text
    assert "times more" not in text and "divided by" in text


def test_the_root_only_fsdp_key_states_what_happens_not_a_comparison() -> None:
    question = QUESTIONS["fsdp-wrap-blocks"]
    (key,) = [o for o in question.options if o.correct]
    assert "like DDP" not in key.text and "one unit" in key.text
