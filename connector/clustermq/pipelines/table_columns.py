"""The columns of the table the queue → Delta sink writes, and the names it reserves.

Apart from the sink because the body parse needs them too: a parsed column must not clash with
a table column, nor with the key the sink de-duplicates by while a batch is processed.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

READER_COLUMNS = (
    "node", "destination", "message_id", "group_id", "sequence", "redelivered", "priority",
    "timestamp", "headers", "body",
)
TABLE_COLUMNS = READER_COLUMNS + ("ingest_time", "batch_id")
#: reader columns an option adds (``includeDeliveryCount``): in the table when the rows have them
OPTIONAL_READER_COLUMNS = ("delivery_count",)
KEY = "_clustermq_key"  # the de-duplication key while a batch is processed; never written
COPIES = "_clustermq_copies"  # rows of the batch with that key; never written
ANY_REDELIVERED = "_clustermq_any_redelivered"  # some copy was flagged redelivered; never written
#: why the table would refuse the row, with a park queue (pipelines/park.py); never written
PARK_REASON = "_clustermq_park_reason"
#: the sink's working columns while a batch is processed; a parsed column must not use them
WORKING_COLUMNS = (KEY, COPIES, ANY_REDELIVERED)
CORRUPT_COLUMN = "_corrupt"  # a body that did not parse, as text (with a BodyParse)


def stamped(rows: DataFrame, batch_id: int) -> DataFrame:
    """``rows`` with the two columns the sink adds: ``ingest_time`` (one instant for the whole
    append: ``current_timestamp`` is evaluated once per query) and ``batch_id``."""
    return (rows.withColumn("ingest_time", F.current_timestamp())
            .withColumn("batch_id", F.lit(batch_id).cast("long")))
