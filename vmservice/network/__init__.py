# -*- test-case-name: tests.network -*-
"""
Host networking of the daemon's VMs.
"""
