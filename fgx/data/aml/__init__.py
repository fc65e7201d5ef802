"""AMLworld-format transaction data: generator, CSV reader, features, splits."""
