def deployment_jobs_sweep(*, batch_size: int = 500) -> int:
    """Re-dispatches queued deployment and build jobs that no worker picked up, and fails
    running jobs whose worker was lost (see ``services.job_run``)."""
    from .services import deployment_jobs_redispatch

    return deployment_jobs_redispatch(batch_size=batch_size)
