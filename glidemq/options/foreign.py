"""Words of other job queues (Celery, RQ) that glidemq spells another way: the hint an error
gives when one of them is used. None of them is accepted: a Celery option that was taken
silently would do nothing, or something else than its writer meant.
"""

from __future__ import annotations

__all__ = ["JOB_METHODS", "OPTIONS", "TASK_METHODS", "missing_attribute"]

_SIGNATURE = (
    "glidemq's form of Celery's .s() is task.flow_job(*args, **kwargs), "
    "joined with glidemq.chain / group / chord and added by a FlowProducer"
)

OPTIONS: dict[str, str] = {
    "max_retries": (
        "glidemq counts every try, the first one included: Celery's max_retries=3 is "
        "attempts=4 (and attempts=1, the default, means no retry)"
    ),
    "countdown": (
        "use the job option delay, in milliseconds: countdown=10 is delay=10_000, as "
        "task.with_options(delay=10_000).delay(...)"
    ),
    "eta": (
        "use the job option delay, in milliseconds from now: "
        "delay=int((eta - datetime.now(timezone.utc)).total_seconds() * 1000)"
    ),
    "bind": (
        "a glidemq task takes only its arguments; inside it, glidemq.current_job() is the "
        "running job (Celery's self / self.request: id, attempts_made, log, update_progress)"
    ),
    "autoretry_for": (
        "every exception is retried while attempts remain; raise glidemq.UnrecoverableError "
        "for those that must not be"
    ),
    "retry_backoff": "use backoff={'type': 'exponential', 'delay': ms}",
    "default_retry_delay": "use backoff={'type': 'fixed', 'delay': ms}",
    "time_limit": "use the job option timeout, in milliseconds (time_limit=30 is timeout=30_000)",
    "soft_time_limit": "glidemq has one time limit per try: the job option timeout, in ms",
    "expires": "use the job option ttl, in milliseconds",
    "rate_limit": (
        "a glidemq rate limit holds for every worker of a queue: "
        "Queue.set_global_rate_limit(max, duration_ms), or Worker(limiter=RateLimit(...))"
    ),
    "acks_late": "not needed: a job stays its worker's until it finishes (docs/MIGRATING.md)",
    "ignore_result": "use remove_on_complete=True (the result goes with the job)",
    "retry": "attempts and backoff say how a job is retried",
}
"""Option names of Celery's `@app.task` and `apply_async` -> glidemq's way."""

TASK_METHODS: dict[str, str] = {
    "s": _SIGNATURE,
    "si": _SIGNATURE,
    "apply_async": (
        "glidemq's form of apply_async(args, kwargs, countdown=..., priority=...) is "
        "task.with_options(delay=ms, priority=...).delay(*args, **kwargs) (await .add(...) in "
        "async code)"
    ),
    "apply": "call the task: task(*args, **kwargs) runs the function here and now",
    "retry": (
        "glidemq's form of self.retry(countdown=60) is raise glidemq.Retry(delay=60_000); the "
        "try counts as one of the job's attempts"
    ),
    "map": "use task.sync.add_bulk([{...}, ...]): one job per mapping of keyword arguments",
}
"""Method names of a Celery task -> glidemq's way."""

JOB_METHODS: dict[str, str] = {
    "get": "glidemq's form of AsyncResult.get(timeout=10) is job.result(timeout=10)",
    "wait": "glidemq's form of AsyncResult.wait(timeout=10) is job.result(timeout=10)",
    "ready": "use job.get_state() in ('completed', 'failed')",
    "successful": "use job.get_state() == 'completed'",
    "failed": "use job.get_state() == 'failed'",
    "forget": "use job.remove()",
    "revoke": "use Queue.revoke(job.id)",
    "status": "use job.state (read from the server each time) or job.get_state()",
    "info": "use job.refresh() and its fields (progress, failed_reason, stacktrace, ...)",
    "traceback": "use job.refresh().stacktrace",
    "return_value": "glidemq's form of RQ's job.return_value() is job.result(timeout=...)",
    "get_status": "glidemq's form of RQ's job.get_status() is job.get_state()",
}
"""Method names of Celery's AsyncResult and RQ's Job -> glidemq's way, on a sync Job."""


def missing_attribute(owner: str, name: str, hints: dict[str, str]) -> AttributeError:
    """The AttributeError for `owner.name`, with the hint when another queue's word."""
    hint = hints.get(name)
    text = f"{owner!r} object has no attribute {name!r}"
    return AttributeError(f"{text}: {hint}" if hint else text, name=name)
