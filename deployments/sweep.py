def deployment_jobs_sweep(*, batch_size: int = 500) -> int:
    """Re-dispatches queued deployment and build jobs that no worker picked up."""
    return 0  # the deployments worker fills this in
