"""glidemq-run: a supervisor that forks worker processes and keeps them healthy."""
