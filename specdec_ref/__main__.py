"""python -m specdec_ref: the command line (cli.py)."""
from .cli import main

main()
