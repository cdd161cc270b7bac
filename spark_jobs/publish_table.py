"""Entry file of the ``publish_table`` job for ``spark-submit`` by path; the job is the module
``clustermq.jobs.publish_table`` (``python -m clustermq.jobs.publish_table --help`` describes it).

spark-submit runs a file, not a module, so this file stays next to the package; it holds no
logic of its own, so a job submitted by path runs exactly what ``python -m`` runs.
"""

import sys

from clustermq.jobs.publish_table import main

if __name__ == "__main__":
    sys.exit(main())
