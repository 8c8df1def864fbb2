"""One module per `meshgate` command, as asv's commands/: each holds its argparse, its printing
and its exit codes, and calls the layers below for the work (options.py holds the options
several share). cli.py lists them."""
