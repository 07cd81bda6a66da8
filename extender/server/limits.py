"""How big a request body may be, and the 413 that answers a bigger one.

The largest real request is a filter (or prioritize) call: the Pod plus the candidate nodes.
- With `nodeCacheCapable: true` (every shipped KubeSchedulerConfiguration) the nodes are names:
  about 18 bytes a node, 0.18 MB for 10,000 nodes. The Pod is at most 1.5 MiB (etcd's default
  object limit, which the API server enforces), so a real body stays under 2 MiB.
- With `nodeCacheCapable: false` kube-scheduler sends every candidate Node in full. A GPU node
  with 60 feature labels, 50 images in status and the usual conditions is about 15 KB of JSON
  (measured), so 10,000 nodes are about 150 MB.
The default, 32 MiB, is sixteen times the largest body of the shipped configuration and holds
full Nodes for about 2,000 such nodes; a cluster that sends full Nodes for more raises it
(`--max-body 200` for 10,000). A bigger body is refused with 413 before it is decoded, so a
client cannot make topogang hold an unbounded body in memory.
"""

from __future__ import annotations

import orjson

DEFAULT_MAX_BODY_MIB = 32


def too_large(limit: int, verb: str) -> bytes:
    """The body of the 413: a JSON Error saying the limit and the setting that raises it."""
    message = (
        f"topogang: {verb} request body larger than the limit of {limit / 2**20:g} MiB "
        "(--max-body, TOPOGANG_MAX_BODY; kube-scheduler sends full Nodes without nodeCacheCapable: true)"
    )
    return orjson.dumps({"Error": message})
