"""The bottom of the import graph: small pieces every other package may use (the
console line a person watching a run reads). It imports no package of this project."""
