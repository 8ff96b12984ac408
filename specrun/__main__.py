"""`python -m specrun`."""

from .cli import main

main()
