"""
Host networking of the daemon's VMs.
"""
