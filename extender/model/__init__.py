"""The API model: typed, frozen views of Kubernetes objects and topogang's own kinds.

Everything here is pure: parsing raw JSON-like mappings into frozen dataclasses, and checking
them. Nothing here does I/O, logs, or knows about the scheduler.
"""
