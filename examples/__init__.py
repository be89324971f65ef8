"""Runnable examples; importable from YAML by ``class_path`` when run from the repository root."""
