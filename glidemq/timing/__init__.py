"""Time: the clock job times come from and the worker's timers wait on (`clock`), cron
expressions, a worker's own pacer, and the time budget of runs that wait queued."""
