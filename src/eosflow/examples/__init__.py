"""Worked examples of what users plug into eosflow (docs/guides/pipelines.md, "Python transforms")."""
