"""`topogang serve`: the extender HTTP API that kube-scheduler calls, over the live cache."""
