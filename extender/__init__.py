"""topogang: a kube-scheduler extender that places AI workloads as whole gangs on a topology."""

__version__ = "0.1.0"
