"""Reconciling a chaos ledger: what was enqueued against what completed, per run.

Ledger events (see `records`): `enqueued` when a producer's add returned, `completed` when a
worker finished the job (at-least-once delivery may report a job twice), `fault` when a fault
was injected. Per run:

- enqueued: distinct job ids enqueued; completed: those of them with at least one completion;
- lost = enqueued ids with no completion (must be 0);
- duplicates = completions beyond the first, summed over jobs;
- unexpected = completed ids that were never enqueued (a ledger gap or a foreign job);
- recovery_s: for each fault, the time to the next completion after it; the largest is
  reported (null when nothing completed after a fault).

Per fault (`ledger_recovery`): its kind, when it hit, the time to the next completion, and
the run's own recovery time (back to half the pre-fault throughput, from the `recovery`
events glidemq-chaos writes; null in older ledgers). Per run and outcome
(`ledger_outcomes`): how many jobs got each verdict outcome (the `outcome` field of the
final `completed` / `failed` / `unfinished` events).

Latency is enqueue to first completion. Throughput per second counts completion events in
each whole second since the run's first event, seconds without any included as 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["ledger_tables"]

_PCTS = (0.5, 0.95, 0.99)


def ledger_tables(events: DataFrame) -> dict[str, DataFrame]:
    """`ledger_summary`, `ledger_lost`, `ledger_latency`, `ledger_processes`,
    `ledger_throughput`, `ledger_latency_cdf`, `ledger_recovery` and `ledger_outcomes`
    from ledger events."""
    from pyspark.sql import functions as F

    events = events.cache()
    enq = (
        events.filter(F.col("event") == "enqueued")
        .groupBy("run", "job_id")
        .agg(F.min("ts").alias("enqueued_ts"))
    )
    done_events = events.filter(F.col("event") == "completed")
    done = done_events.groupBy("run", "job_id").agg(
        F.count(F.lit(1)).alias("n"), F.min("ts").alias("done_ts")
    )
    jobs = enq.join(done, ["run", "job_id"], "full_outer").cache()
    is_enq = F.col("enqueued_ts").isNotNull()
    is_done = F.col("n").isNotNull()
    counts = jobs.groupBy("run").agg(
        F.sum(is_enq.cast("long")).alias("enqueued"),
        F.sum((is_enq & is_done).cast("long")).alias("completed"),
        F.coalesce(F.sum("n"), F.lit(0)).cast("long").alias("completions"),
        F.sum((is_enq & ~is_done).cast("long")).alias("lost"),
        F.coalesce(F.sum(F.greatest(F.col("n") - 1, F.lit(0))), F.lit(0))
        .cast("long")
        .alias("duplicates"),
        F.sum((~is_enq & is_done).cast("long")).alias("unexpected"),
    )
    spans = events.groupBy("run").agg(
        F.min("ts").alias("first_ts"),
        F.max(F.when(F.col("event") == "completed", F.col("ts"))).alias("last_completion_ts"),
    )
    faults = events.filter(F.col("event") == "fault").select(
        "run", F.col("ts").alias("fault_ts"), F.coalesce("kind", F.lit("(unknown)")).alias("kind")
    )
    later = done_events.select(F.col("run").alias("done_run"), F.col("ts").alias("done_ts"))
    after = (
        faults.join(
            later,
            (F.col("run") == F.col("done_run")) & (F.col("done_ts") > F.col("fault_ts")),
            "left",
        )
        .groupBy("run", "fault_ts", "kind")
        .agg(F.min("done_ts").alias("next_done"))
    ).cache()
    recovery = after.groupBy("run").agg(
        F.count(F.lit(1)).alias("faults"),
        # a fault with no completion after it: never recovered, reported as null
        F.when(F.sum(F.col("next_done").isNull().cast("int")) > 0, F.lit(None).cast("double"))
        .otherwise(F.max(F.col("next_done") - F.col("fault_ts")))
        .alias("recovery_s"),
    )
    seconds = F.col("last_completion_ts") - F.col("first_ts")
    summary = (
        counts.join(spans, "run", "left")
        .join(recovery, "run", "left")
        .select(
            "run",
            "enqueued",
            "completed",
            "completions",
            "lost",
            "duplicates",
            "unexpected",
            F.coalesce(F.col("faults"), F.lit(0)).cast("long").alias("faults"),
            "recovery_s",
            seconds.alias("seconds"),
            F.when(seconds > 0, F.col("completed") / seconds).alias("jobs_per_s"),
            (F.col("lost") == 0).alias("ok"),
        )
        .orderBy("run")
    )
    lost = jobs.filter(is_enq & ~is_done).select("run", "job_id").orderBy("run", "job_id")

    latency_ms = (F.col("done_ts") - F.col("enqueued_ts")) * 1000.0
    per_job = jobs.filter(is_enq & is_done).select("run", latency_ms.alias("latency_ms"))
    pcts = F.percentile("latency_ms", F.lit(list(_PCTS)))
    latency = (
        per_job.groupBy("run")
        .agg(F.count(F.lit(1)).alias("jobs"), pcts.alias("p"), F.max("latency_ms").alias("max_ms"))
        .select(
            "run",
            "jobs",
            F.col("p")[0].alias("p50_ms"),
            F.col("p")[1].alias("p95_ms"),
            F.col("p")[2].alias("p99_ms"),
            "max_ms",
        )
        .orderBy("run")
    )
    cdf_points = [i / 100 for i in range(1, 101)]
    cdf = (
        per_job.groupBy("run")
        .agg(F.percentile("latency_ms", F.lit(cdf_points)).alias("v"))
        .select("run", F.posexplode("v").alias("i", "latency_ms"))
        .select("run", ((F.col("i") + 1) / 100.0).alias("fraction"), "latency_ms")
        .orderBy("run", "fraction")
    )

    run_total = done_events.groupBy("run").agg(F.count(F.lit(1)).alias("run_completions"))
    span = F.col("last_ts") - F.col("first_ts")
    processes = (
        done_events.groupBy("run", "pid")
        .agg(
            F.count(F.lit(1)).alias("completions"),
            F.countDistinct("job_id").alias("jobs"),
            F.min("ts").alias("first_ts"),
            F.max("ts").alias("last_ts"),
        )
        .join(run_total, "run")
        .select(
            "run",
            "pid",
            "completions",
            "jobs",
            "first_ts",
            "last_ts",
            F.when(span > 0, F.col("completions") / span).alias("jobs_per_s"),
            (F.col("completions") / F.col("run_completions")).alias("share"),
        )
        .orderBy("run", "pid")
    )

    starts = events.groupBy("run").agg(F.min("ts").alias("start"))
    done_seconds = done_events.join(starts, "run").select(
        "run", F.floor(F.col("ts") - F.col("start")).cast("long").alias("second")
    )
    per_second = done_seconds.groupBy("run", "second").agg(F.count(F.lit(1)).alias("completions"))
    # Every second from the run's start to its last completion, the empty ones included:
    # a stall after a fault shows as zeros, not as a gap.
    grid = (
        done_seconds.groupBy("run")
        .agg(F.max("second").alias("last"))
        .select("run", F.explode(F.sequence(F.lit(0).cast("long"), "last")).alias("second"))
    )
    throughput = (
        grid.join(per_second, ["run", "second"], "left")
        .select("run", "second", F.coalesce("completions", F.lit(0)).alias("completions"))
        .orderBy("run", "second")
    )
    measured = events.filter(F.col("event") == "recovery").select(
        "run", F.col("ts").alias("fault_ts"), "recovery_s"
    )
    recovery_by_fault = (
        after.join(starts, "run")
        .join(measured, ["run", "fault_ts"], "left")
        .select(
            "run",
            "kind",
            (F.col("fault_ts") - F.col("start")).alias("at_s"),
            (F.col("next_done") - F.col("fault_ts")).alias("next_completion_s"),
            "recovery_s",
        )
        .orderBy("run", "at_s")
    )
    outcomes = (
        events.filter(F.col("outcome").isNotNull())
        .groupBy("run", "outcome")
        .agg(F.countDistinct("job_id").alias("jobs"))
        .orderBy("run", "outcome")
    )
    return {
        "ledger_recovery": recovery_by_fault,
        "ledger_outcomes": outcomes,
        "ledger_summary": summary,
        "ledger_lost": lost,
        "ledger_latency": latency,
        "ledger_latency_cdf": cdf,
        "ledger_processes": processes,
        "ledger_throughput": throughput,
    }
