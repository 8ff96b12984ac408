"""`python -m specrun`."""

from .cli.app import main

main()
