"""The ready-made jobs, each a module runnable as ``python -m clustermq.jobs.<job>``.

* :mod:`~clustermq.jobs.queue_to_delta`: stream a queue into a Delta table, each message once;
* :mod:`~clustermq.jobs.queue_to_parquet`: stream a queue into a Parquet folder;
* :mod:`~clustermq.jobs.export_backlog`: snapshot (browse) or drain a queue's backlog;
* :mod:`~clustermq.jobs.publish_table`: send a Delta table or Parquet folder to a queue.

Every job has ``main(argv=None) -> int``; ``spark_jobs/<job>.py`` in the source tree are thin
entry files calling it, for ``spark-submit`` by path. A failing job prints one line
``<job>: error: <cause>`` and exits 2 for a bad setting, 1 for a failure at run time
(:mod:`clustermq.jobs.runner`).
"""
