"""glidemq_addBulk's compact layout: runs of like jobs share one header."""

from __future__ import annotations

from glidemq.wire.adds import pack_bulk

PLAIN = ["job", "{}", "0", "0", "1", "0", "", ""]


def test_like_neighbours_share_one_header() -> None:
    args = pack_bulk(7, [[*PLAIN, "a"], [*PLAIN, "b"], [*PLAIN, "c"]])
    assert args == ["7", "3", *PLAIN, "a", "b", "c"]


def test_a_changed_header_starts_a_new_run() -> None:
    other = ["job", '{"priority":2}', "0", "2", "1", "0", "", ""]
    args = pack_bulk(1, [[*PLAIN, "a"], [*other, "b"], [*PLAIN, "c"], [*PLAIN, "d"]])
    assert args == ["1", "1", *PLAIN, "a", "1", *other, "b", "2", *PLAIN, "c", "d"]


def test_a_job_with_a_custom_id_is_a_run_of_its_own() -> None:
    own = ["job", '{"jobId":"x"}', "0", "0", "1", "0", "x", ""]
    args = pack_bulk(1, [[*own, "a"], [*own, "b"], [*PLAIN, "c"]])
    assert args == ["1", "1", *own, "a", "1", *own, "b", "1", *PLAIN, "c"]


def test_nothing_to_add_is_only_the_timestamp() -> None:
    assert pack_bulk(5, []) == ["5"]
