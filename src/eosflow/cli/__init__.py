"""The `eosflow` command: a parser in main.py and a module per runner's subcommand."""
