"""The construct's capacity options reach the template: Fargate Spot, the event source mapping's modes,
and the worker's task scale-in protection.

The example app runs its worker on Spot above one regular task; the ``options`` stack's ``Imported``
worker maps its queues with a batching window, provisioned pollers and the mapping's metrics
(``synth_example.py``).
"""

from __future__ import annotations

from sqsjobs.deploy.rules import TASK_PROTECTION_ACTIONS
from tests.infra.synth_example import BATCHING_WINDOW_S, POLLERS
from tests.infra.test_template import actions, role_of_task, statements


def test_the_worker_service_runs_on_spot_above_one_regular_task(full):
    # GIVEN the example app's FargateWorker(spot=True, on_demand_base=1)
    service = full.one("AWS::ECS::Service")
    # THEN the service names capacity providers instead of a launch type
    assert "LaunchType" not in service
    strategy = {s["CapacityProvider"]: s for s in service["CapacityProviderStrategy"]}
    assert strategy["FARGATE_SPOT"]["Weight"] == 1
    assert strategy["FARGATE"] == {"CapacityProvider": "FARGATE", "Base": 1, "Weight": 0}
    # AND the cluster has both Fargate capacity providers
    (association,) = full.resources("AWS::ECS::ClusterCapacityProviderAssociations").values()
    assert set(association["Properties"]["CapacityProviders"]) == {"FARGATE", "FARGATE_SPOT"}


def test_the_event_source_mapping_takes_a_window_provisioned_pollers_and_metrics(options):
    mappings = options.resources("AWS::Lambda::EventSourceMapping")
    imported = [m["Properties"] for k, m in mappings.items() if k.startswith("Imported")]
    named = [m["Properties"] for k, m in mappings.items() if k.startswith("Named")]
    assert imported and named
    for mapping in imported:
        assert mapping["MaximumBatchingWindowInSeconds"] == BATCHING_WINDOW_S
        assert mapping["ProvisionedPollerConfig"] == {
            "MinimumPollers": POLLERS[0],
            "MaximumPollers": POLLERS[1],
        }
        assert mapping["MetricsConfig"] == {"Metrics": ["EventCount"]}
        assert "ScalingConfig" not in mapping  # the pollers bound it: MaximumConcurrency is exclusive
    # a worker without them keeps Lambda's defaults
    for mapping in named:
        assert not {"MaximumBatchingWindowInSeconds", "ProvisionedPollerConfig", "MetricsConfig"} & set(
            mapping
        )


def test_the_worker_task_may_protect_its_own_tasks_from_scale_in_and_nothing_more(full):
    # The ECS agent calls UpdateTaskProtection with the task role when the worker asks it to
    # (sqsjobs.runtime.protection): the worker's role has that action, on its cluster's tasks only.
    role = role_of_task(full, "worker")
    [statement] = [s for s in statements(full, role) if actions([s]) & set(TASK_PROTECTION_ACTIONS)]
    assert actions([statement]) == set(TASK_PROTECTION_ACTIONS)
    (cluster,) = full.resources("AWS::ECS::Cluster")
    parts = statement["Resource"]["Fn::Join"][1]
    assert parts[-3:] == [":task/", {"Ref": cluster}, "/*"], parts
    # the sweeper (a standalone task, which ECS refuses to protect) gets no such action
    assert not actions(statements(full, role_of_task(full, "sweeper"))) & set(TASK_PROTECTION_ACTIONS)
