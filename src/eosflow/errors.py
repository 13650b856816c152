"""Errors an operator must fix: each message says what is wrong and what to do."""


class StackError(RuntimeError):
    """Something the operator must fix; the message says what and how."""


class PipelineConfigError(ValueError):
    """The pipelines file is wrong; the message names the pipeline, the key and what is expected."""
