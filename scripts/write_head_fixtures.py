"""Write the tiny EAGLE-3 and DFlash fixtures the tests use into a folder, to benchmark them by hand:
the target (`feature-target.gguf`), `eagle3-head.gguf`, `dflash-head.gguf` and `dflash2-head.gguf`.

    python scripts/write_head_fixtures.py DIR

Needs the test dependencies (`gguf`). The weights are random but shaped so the heads often
predict the target's next token (tests/support/head_models.py says how); their costs and
acceptance say nothing about real heads.
"""

from __future__ import annotations

import sys
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent.parent / "tests" / "support"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/write_head_fixtures.py DIR", file=sys.stderr)
        return 2
    sys.path.insert(0, str(SUPPORT))
    from head_models import write_dflash_gguf, write_eagle3_gguf
    from tiny_models import write_tiny_gguf

    folder = Path(argv[0])
    folder.mkdir(parents=True, exist_ok=True)
    target = write_tiny_gguf(folder / "feature-target.gguf", seed=0, layer_scale=0.08, name="tiny-feature-target")
    write_eagle3_gguf(folder / "eagle3-head.gguf", target_layers=(0, 1, 1), target_embd=64)
    write_dflash_gguf(folder / "dflash-head.gguf", target, target_layers=(0, 1), block_size=8)
    write_dflash_gguf(folder / "dflash2-head.gguf", target, target_layers=(0, 1), block_size=8, selector_top_k=4)
    for path in sorted(folder.glob("*.gguf")):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
