"""``python -m harness`` runs the command-line interface."""

from harness.cli.main import main

raise SystemExit(main())
