"""`python -m mrtr ...` runs the `mrtr` command line."""

from .cli import main

raise SystemExit(main())
