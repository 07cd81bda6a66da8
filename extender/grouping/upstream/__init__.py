"""Kubernetes' own gang API (scheduling.k8s.io PodGroups and CompositePodGroups) as gangs:
`objects` reads the objects, `tree` makes a gang of the tree under each root."""
