"""Files the harness writes into a candidate's box (infra/box_file.py): a link the candidate's code
planted under the name is replaced, never written through."""

import pytest

from cuda_agent.env.infra.box_file import box_file


def test_a_file_the_harness_writes_into_the_box_replaces_a_planted_link_instead_of_writing_through_it(tmp_path):
    box, victim = tmp_path / "box", tmp_path / "victim.txt"
    box.mkdir()
    victim.write_text("the harness's own file")
    (box / "job.json").symlink_to(victim)
    with box_file(box, "job.json") as fh:
        fh.write(b"{}")
    assert victim.read_text() == "the harness's own file"
    assert not (box / "job.json").is_symlink() and (box / "job.json").read_bytes() == b"{}"
    assert [p.name for p in box.iterdir()] == ["job.json"]   # no temporary left beside it


def test_a_file_whose_writing_fails_leaves_nothing_in_the_box(tmp_path):
    with pytest.raises(RuntimeError):
        with box_file(tmp_path, "reference_init.pt") as fh:
            fh.write(b"half")
            raise RuntimeError("the save failed")
    assert list(tmp_path.iterdir()) == []
