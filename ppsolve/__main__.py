from ppsolve.cli import entry

entry()
