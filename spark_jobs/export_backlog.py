"""Entry file of the ``export_backlog`` job for ``spark-submit`` by path; the job is the module
``clustermq.jobs.export_backlog`` (``python -m clustermq.jobs.export_backlog --help`` describes it).

spark-submit runs a file, not a module, so this file stays next to the package; it holds no
logic of its own, so a job submitted by path runs exactly what ``python -m`` runs.
"""

import sys

from clustermq.jobs.export_backlog import main

if __name__ == "__main__":
    sys.exit(main())
