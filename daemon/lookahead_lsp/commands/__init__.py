"""The command line, one module per command: cli.py parses the arguments and hands each command
to its module (serve.py: the language server over stdio, a socket or TCP; complete.py: one
completion printed; cache.py: build-cache and inspect-cache; models.py: list, pull, info;
lookup_stats.py: a text replayed through the drafter). The top layer: nothing imports it."""
