"""Runnable pipelines and the command line: config loading, options, build/verify/inspect."""
