"""The application's tasks: run them with ``pgjobq worker --tasks examples.tasks_app.tasks``."""

from __future__ import annotations

import asyncio

import pgjobq

tasks = pgjobq.Tasks(queue="emails")


@tasks.task(max_attempts=5)
def send_welcome(user_id: int) -> str:
    """Send the welcome email to a new user (here: say so)."""
    return f"welcome sent to user {user_id}"


@tasks.task(queue="reports", timeout=60)
async def render_report(report_id: int, job: pgjobq.Job) -> dict[str, int]:
    """Render a report; the parameter annotated pgjobq.Job receives the job."""
    await asyncio.sleep(0.01)  # the rendering
    return {"report": report_id, "attempt": job.attempts}


@tasks.task(queue="payments", retry_on=(ConnectionError,))
def charge(order_id: int, cents: int) -> str:
    """Charge an order: retried when the payment service cannot be reached, failed at once otherwise."""
    if cents <= 0:
        raise ValueError(f"cannot charge {cents} cents")
    return f"charged {cents} cents for order {order_id}"
