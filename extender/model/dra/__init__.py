"""Dynamic Resource Allocation (`resource.k8s.io/v1`) as topogang reads it: ResourceSlices (the
devices a driver publishes per node), DeviceClasses, ResourceClaims and ResourceClaimTemplates,
parsed into frozen values, and the CEL of their device selectors. Pure: no I/O.

Field names follow k8s.io/api/resource/v1 (types.go); a device is named by (driver, pool,
device), as a claim's `status.allocation.devices.results` names it.
"""
