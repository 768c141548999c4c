"""How job data, results and task arguments become bytes and back: the serializers, the size
limits and compression (`serialize`), and a task's typed arguments (`payload`)."""
