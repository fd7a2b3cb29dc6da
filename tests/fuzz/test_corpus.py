"""The hostile corpus against the real server: no 5xx, every error in the spec's body with x-request-id."""

from __future__ import annotations

import pytest
from corpus import Hostile, hostile_requests
from fuzz_kit import Tally, problems, raw_request

FIXED_ON = "fixed on branch {owner}"


def _param(case: Hostile) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=FIXED_ON.format(owner=case.owner))] if case.owner else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(case) for case in hostile_requests()])
def test_hostile_request(server: str, tally: Tally, case: Hostile) -> None:
    answer = raw_request(server, case.method, case.target, case.headers, case.body, case.length)
    found = problems(answer.status, answer.headers, answer.body, has_body=case.method != "HEAD")
    tally.note("corpus" if case.owner is None else f"corpus, known to {case.owner}", case.id, answer.status, found)
    assert not found, f"{case.id}: {found} body={answer.body[:300]!r}"
