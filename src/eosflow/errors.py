"""Errors an operator must fix: each message says what is wrong and what to do."""


class StackError(RuntimeError):
    """Something the operator must fix; the message says what and how."""


class PipelineConfigError(ValueError):
    """The pipelines file is wrong; the message names the pipeline, the key and what is expected."""


class SinkUnavailableError(RuntimeError):
    """A sink's store (a catalog, an object store) did not answer; nothing was committed: a retry may do."""


class SinkAccessError(RuntimeError):
    """A sink's store refused (credentials, a bucket, its configuration); nothing was committed: fix it."""
