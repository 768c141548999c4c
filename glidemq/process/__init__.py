"""Process plumbing shared by the worker runtime (`glidemq-run`), the sandbox and the tools:
the frame codec of their pipes and sockets, the set-up of a child process, the event loop
factory and the RSS reader."""
