"""Results of a run: the Result record, summaries of the step log, report text, trace export, output files."""
