"""What glidemq's command-line tools share: argparse value types, one-line errors with a
"did you mean", and the progress line of long commands."""
