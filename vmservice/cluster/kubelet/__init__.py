"""
The kubelet API of a cluster node, over TLS: ``kubectl logs`` (a VM's serial
console) and ``kubectl exec`` (a command in the VM, over the
``v5.channel.k8s.io`` WebSocket protocol); :func:`.site.kubelet_site` builds it.
"""
