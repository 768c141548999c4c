import asyncio

from glidemq import Job, Queue, Worker


async def send_email(job: Job[dict, str]) -> str:
    await job.update_progress(50)
    return f"sent to {job.data['to']}"


async def main() -> None:
    async with Queue("emails") as queue:  # $GLIDEMQ_URL, else valkey://127.0.0.1:6379
        job = await queue.add("welcome", {"to": "ada@example.com"}, {"attempts": 3})
        async with Worker("emails", send_email, concurrency=50):
            await job.wait_until_finished(timeout=10)
        print(f"job {job.id} {job.state}: {job.returnvalue}")


asyncio.run(main())
