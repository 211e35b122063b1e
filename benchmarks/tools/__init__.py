"""Tools: the reports of a results folder collected into one page; test sets made from the data."""
