"""The `glidemq` PySpark data source: `spark.read.format("glidemq")` and `df.write.format(...)`.

Register it once per session with `glidemq.spark.register(spark)`. Options are checked on the
driver before any task starts; see docs/SPARK.md for the list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter

from ..errors import ValidationError
from .options import ReadOptions, WriteOptions
from .reader import JOB_SCHEMA, JobReader, check_schema
from .writer import JobWriter, RowPlan, check_reachable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["GlideMQDataSource", "register"]


class GlideMQDataSource(DataSource):
    """Jobs of one queue as rows (read), rows as new jobs (write, append mode only)."""

    @classmethod
    def name(cls) -> str:
        return "glidemq"

    def schema(self) -> str:
        return JOB_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ReadOptions.parse(self.options)
        check_schema(schema)
        return JobReader(opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ValidationError(
                "mode",
                "the glidemq source only appends jobs; use .mode('append') "
                "(to empty a queue first, use Queue.obliterate or Queue.drain)",
            )
        opts = WriteOptions.parse(self.options)
        plan = RowPlan.build(opts, schema)
        check_reachable(opts.connection)
        return JobWriter(opts, plan)


def register(spark: SparkSession) -> None:
    """Make `format("glidemq")` available in this SparkSession."""
    spark.dataSource.register(GlideMQDataSource)
