"""The bottom of the import graph: small pieces every other package may use (the console
line a person watching a run reads, quiet hub loading, the one atomic file writer, the
error types lower packages raise). It imports no package of this project."""
