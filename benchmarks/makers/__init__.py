"""The scripts that write the bundled problem files of instances/ (deterministic)."""
