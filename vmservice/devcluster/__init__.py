"""
A real Kubernetes control plane for development and CI, built from Debian's packages.

``python -m vmservice.devcluster build|start|stop|status`` (and ``make cluster``): the control plane's
binaries built once into a cache outside the clone, keyed by their recipe (:mod:`.recipe`, :mod:`.build`),
then etcd, kube-apiserver, kube-scheduler and kube-controller-manager started on loopback with generated
certificates (:mod:`.certificates`), tokens and kubeconfigs (:mod:`.identities`), from command lines
(:mod:`.commands`) on ports chosen by :mod:`.ports`, recorded in ``state.json`` (:mod:`.state`) and driven
by :mod:`.control`. A development tool: the daemon never imports it.
"""
