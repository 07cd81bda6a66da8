"""Devices handed out by Dynamic Resource Allocation, counted the way topogang counts GPUs.

A request for devices becomes a *device resource*: a resource name (`devices/<class>`, with a
digest of its selectors when it has any) whose capacity on a node is the number of that node's
devices the class and the selectors select, and whose use is the devices claims already hold
there (`inventory.py`). A pod's claims become requests of those resources (`demand.py`), so the
planning engine plans devices per node exactly as it plans `nvidia.com/gpu`. Pure: no I/O.
"""

from extender.core.dra.demand import DeviceDemand, pod_demand
from extender.core.dra.inventory import DeviceInventory
from extender.core.dra.keys import DEVICE_PREFIX, device_key, is_device_resource

__all__ = ["DEVICE_PREFIX", "DeviceDemand", "DeviceInventory", "device_key", "is_device_resource", "pod_demand"]
