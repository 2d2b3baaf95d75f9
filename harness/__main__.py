"""``python -m harness`` runs the command-line interface."""

from harness.cli import main

raise SystemExit(main())
