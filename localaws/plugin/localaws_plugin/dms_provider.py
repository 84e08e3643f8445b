"""placeholder"""

from localstack.services.plugins import ServiceLifecycleHook


class DmsReplicationProvider(ServiceLifecycleHook):
    pass
