"""The placement-quality benchmark on a trace (bench/trace.py), in parts small enough to test.

cluster   the GPU cluster: zones > blocks > racks > nodes, as NodeInfo and as index arrays
workload  jobs: the seeded trace generator and the CSV reader
gangs     a job as the PodGroup and pods topogang sees, built by the engine's own build_gang
policies  topogang (through extender.placement.plan) and the baselines it is compared with
replay    the event simulation: arrivals, the queue in kube-scheduler's order, completions
metrics   the figures of one replay
figures   the PNG pictures (matplotlib, optional)
"""
