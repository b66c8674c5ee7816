"""Running jobs: the asyncio worker (ECS), one job's execution, acks, the sweeper and the Lambda adapter."""
