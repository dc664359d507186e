"""Exercise 6's docstring quotes the model's size and a rank's share in the units the grader
prints them in; both are computed here from the model itself, so neither can drift."""

from __future__ import annotations

from conftest import REPO

from grader.checks.ex06_fsdp.checks import kibibytes
from grader.rank.training import TinyTransformer

FP32_BYTES = 4


def test_stub_docstring_quotes_the_computed_sizes():
    model = TinyTransformer()
    total = sum(p.numel() for p in model.parameters())
    block = sum(p.numel() for p in model.blocks[0].parameters())
    share = round(total / 4)
    stub = (REPO / "exercises" / "ex06_fsdp.py").read_text()
    text = " ".join(stub.split())
    assert f"{total} parameters, {kibibytes(FP32_BYTES * total)} in fp32" in text
    assert f"W = 4: about {share}, {kibibytes(FP32_BYTES * share)}" in text
    assert f"one block ({block} parameters)" in text
