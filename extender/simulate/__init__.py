"""`topogang simulate`: the extender's own logic run over Kubernetes YAML, no cluster needed."""
