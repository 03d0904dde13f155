"""One module per ``ppsolve`` subcommand (see ppsolve.cli)."""
