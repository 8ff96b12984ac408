"""Every option of every command is explained in --help and named in the README."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from specrun.cli.app import _register_optional, app

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def commands() -> dict:
    _register_optional()
    return typer.main.get_command(app).commands


@pytest.mark.parametrize("name", ["run", "chat", "bench", "doctor", "worker"])
def test_every_option_has_help_and_is_in_the_readme(name):
    command = commands()[name]
    for param in command.params:
        if param.param_type_name != "option" or param.hidden:
            continue
        assert param.help, f"{name} {param.opts[0]} has no help"
        for flag in param.opts + param.secondary_opts:
            if flag.startswith("--") and flag != "--help":
                assert f"`{flag}" in README or f"{flag}`" in README or f", {flag}" in README, (
                    f"{name} {flag} is not in the README"
                )
