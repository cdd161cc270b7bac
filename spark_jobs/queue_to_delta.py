"""Entry file of the ``queue_to_delta`` job for ``spark-submit`` by path; the job is the module
``clustermq.jobs.queue_to_delta`` (``python -m clustermq.jobs.queue_to_delta --help`` describes it).

spark-submit runs a file, not a module, so this file stays next to the package; it holds no
logic of its own, so a job submitted by path runs exactly what ``python -m`` runs.
"""

import sys

from clustermq.jobs.queue_to_delta import main

if __name__ == "__main__":
    sys.exit(main())
