"""Tables, summaries and file formats of a run."""
