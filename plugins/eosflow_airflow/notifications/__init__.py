"""Notifiers: the one-line alert of a task that fails for good."""
