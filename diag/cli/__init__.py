"""The command line: ``diag <command>``. Nothing imports this package; it imports the rest."""
