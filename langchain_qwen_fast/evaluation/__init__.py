"""``qwen-fast eval``: accuracy, macro-F1 and calibration of a classifier on a labelled file, with
plots. Needs the ``eval`` extra."""
