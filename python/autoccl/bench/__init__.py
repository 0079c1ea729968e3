"""`autoccl bench`: collective and training benchmarks, and reports."""
