"""`python -m mrtr.cli ...` runs the `mrtr` command line."""

from . import main

raise SystemExit(main())
