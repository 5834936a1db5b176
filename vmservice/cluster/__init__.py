"""The Kubernetes node: the daemon as a node of a cluster (its Node, Lease and Pods; its kubelet API)."""
