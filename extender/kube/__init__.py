"""Everything that talks to the API server, async, on kubernetes-asyncio's connection.

    client      KubeClient: raw JSON get / list / watch / post / patch with orjson; ApiError
    resources   the table of what topogang watches (kind, group, versions, plural, scope)
    informer    Informer: list + watch of one resource with bookmarks, relist on 410, back-off
    cache       ClusterCache: one informer per resource, applied to a GangScheduler
    actions     KubeActions: bind, wake (plan-generation annotation), aggregated Events

Nothing here decides anything: decisions are `extender.core`'s; this package feeds it the
cluster and carries its answers back.
"""

from extender.kube.actions import KubeActions
from extender.kube.cache import ClusterCache, Selector
from extender.kube.client import ApiError, KubeClient, make_api_client
from extender.kube.informer import Informer
from extender.kube.resources import WATCHED, Resource
from extender.model.pod import PLAN_GENERATION_ANNOTATION

__all__ = [
    "PLAN_GENERATION_ANNOTATION",
    "WATCHED",
    "ApiError",
    "ClusterCache",
    "Informer",
    "KubeActions",
    "KubeClient",
    "Resource",
    "Selector",
    "make_api_client",
]
