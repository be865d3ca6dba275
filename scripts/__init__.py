"""The `swarm` command line: thin commands over the packages."""
