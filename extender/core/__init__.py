"""The extender's logic, pure and synchronous: the cluster view, reservations and decisions.

`GangScheduler` answers filter, prioritize and bind for one pod at a time against a
`ClusterState`; the HTTP server and the simulator both drive it, so a decision made in a
simulation is the decision the server makes. Nothing here does I/O or reads a clock: callers
pass `now` and turn the returned decisions into API calls and log lines.
"""
