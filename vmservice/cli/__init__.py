# -*- test-case-name: tests.cli -*-
"""
``vmctl``, the command line of vmservice: :func:`vmservice.cli.main.main` is
its console script, :data:`vmservice.cli.main.COMMANDS` its table of
commands (:class:`vmservice.cli.commands.Command` records, one module per
family).  It talks to a daemon through :mod:`vmservice.client` only.
"""
