"""FastAPI: the same helper as `glidemq.integrations.starlette` (FastAPI runs on Starlette).

queues = GlideMQ(["emails"])
app = FastAPI(lifespan=queues.lifespan)

@app.post("/signup")
async def signup(queue: Queue = Depends(queues.dependency("emails"))): ...
"""

from __future__ import annotations

from .starlette import GlideMQ

__all__ = ["GlideMQ"]
