"""scripts/write_head_fixtures.py writes the fixtures the head tests use, byte for byte."""

from __future__ import annotations

from script_module import script_module


def test_the_script_writes_the_test_fixtures(tmp_path, feature_target, eagle3_head, dflash_head, dflash2_head):
    with script_module("write_head_fixtures.py", "write_head_fixtures") as script:
        assert script.main([str(tmp_path)]) == 0
        for fixture in (feature_target, eagle3_head, dflash_head, dflash2_head):
            assert (tmp_path / fixture.name).read_bytes() == fixture.read_bytes()
        assert script.main([]) == 2
