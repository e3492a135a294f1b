"""The experiment: the file and its validation, the matrix of cells and the order runs happen in."""
