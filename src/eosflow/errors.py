"""The one error type the stack raises: a message that says what is wrong and what to do."""


class StackError(RuntimeError):
    """Something the operator must fix; the message says what and how."""
