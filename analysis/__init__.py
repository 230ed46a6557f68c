"""What turns runs into answers: sweeps over the papers' grids, reading their results,
paired tests over seeds, tables in the papers' layout, plots, and the study tools. Above
training/ in the import graph; scripts/ holds the command lines that call it."""
