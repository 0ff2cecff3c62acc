"""``spark-submit`` entry: the ``forewarn`` command line as a script Spark can run.

``spark-submit [options] $(python -c 'import forewarn.guard.spark.submit as m; print(m.__file__)') learn …``
"""
from __future__ import annotations

if __name__ == "__main__":
    from forewarn.guard.cli import main

    main()
