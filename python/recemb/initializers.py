"""Table initializers computed in C++ (pass one as TableConfig(initializer=...)).

  TruncatedNormal(mean=0.0, stddev=0.0)  normal values redrawn beyond 2 stddev; stddev 0 means
                                         1/sqrt(dim) (the default initializer, as TF's)
  Constant(value=0.0)                    every value is `value` ("zeros" or a float does the same)
  RowId(offset=0.0)                      row r holds offset + r in every column (TF's
                                         RowIdInitializer, a testing aid)

Random values depend only on (the Embedding's seed, table name, row, column), not on threads.
"""

from recemb._recemb import Constant, RowId, TruncatedNormal

__all__ = ["TruncatedNormal", "Constant", "RowId"]
