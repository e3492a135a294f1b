"""The two kinds of failure a user sees, each with its own exit code."""


class UserError(Exception):
    """The user's input is wrong: one clear line, exit code 2."""

    exit_code = 2


class RunFailed(Exception):
    """The lab could not do what was asked (a server would not start, a tool is missing): exit code 1."""

    exit_code = 1
