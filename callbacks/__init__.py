"""Ready-to-stack user callbacks, referenced from YAML by class_path (run from the repository root)."""
