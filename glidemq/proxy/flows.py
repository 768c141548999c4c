"""Routes for flows (create a tree or a DAG, read a job's tree of children, revoke a tree)
and job schedulers (list, get, upsert, remove)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ..errors import JobNotFoundError, JobStateError, ValidationError
from ..flows.builders import DagNode
from ..flows.flow import FlowJob, JobNode
from ..job.flowview import Flow, FlowNode
from ..keys import validate_job_id
from ..queue import schedulers as scheduler
from .http import field, json_response, read_json
from .state import Proxy, proxy_of
from .table import Spec

__all__ = ["SPECS"]

_MAX_TREE = 1000  # jobs a tree read or revoke visits at most
_FINISHED = ("completed", "failed")


def _flow_job(proxy: Proxy, node: Any, where: str, depth: int = 0) -> FlowJob:
    if not isinstance(node, dict):
        raise ValidationError(
            where, "must be an object with name, queue_name, data, opts, children"
        )
    if depth > 100:
        raise ValidationError(where, "nested deeper than 100 levels")
    try:
        name = field(node, "name", str)
        queue = proxy.check(field(node, "queue_name", str))
        opts = field(node, "opts", dict, None)
        children = field(node, "children", list, [])
    except ValidationError as exc:
        raise ValidationError(f"{where}.{exc.field}", exc.reason) from None
    kids = [
        _flow_job(proxy, c, f"{where}.children[{i}]", depth + 1) for i, c in enumerate(children)
    ]
    return FlowJob(name, queue, node.get("data"), opts, kids)


def _node_json(node: JobNode) -> dict[str, Any]:
    job = node.job
    return {
        "queue": job.queue_name,
        "id": job.id,
        "name": job.name,
        "children": [_node_json(c) for c in node.children],
    }


async def add_flow(request: Request) -> Response:
    """Add a tree of jobs in one atomic call: `flow` is {name, queue_name, data, opts,
    children: [...]}; a parent runs once its children finished."""
    proxy = proxy_of(request)
    body = await read_json(request)
    flow = _flow_job(proxy, field(body, "flow", dict), "flow")
    return json_response(_node_json(await proxy.flows.add(flow)), 201)


async def add_dag(request: Request) -> Response:
    """Add a DAG in one atomic call: `nodes` are {name, queue_name, data, opts, depends_on,
    key}; answers each node's queue and job id by key."""
    proxy = proxy_of(request)
    body = await read_json(request)
    nodes = []
    for i, raw in enumerate(field(body, "nodes", list)):
        where = f"nodes[{i}]"
        if not isinstance(raw, dict):
            raise ValidationError(where, "must be an object")
        try:
            depends = field(raw, "depends_on", list, [])
            node = DagNode(
                field(raw, "name", str),
                proxy.check(field(raw, "queue_name", str)),
                raw.get("data"),
                field(raw, "opts", dict, None),
                tuple(str(d) for d in depends),
                field(raw, "key", str, None),
            )
        except ValidationError as exc:
            raise ValidationError(f"{where}.{exc.field}", exc.reason) from None
        nodes.append(node)
    jobs = await proxy.flows.add_dag(nodes)
    return json_response({k: {"queue": j.queue_name, "id": j.id} for k, j in jobs.items()}, 201)


def _visible(proxy: Proxy, queue: str) -> bool:
    return proxy.allowed is None or queue in proxy.allowed


def _tree_json(proxy: Proxy, node: FlowNode, path: frozenset[str]) -> dict[str, Any]:
    if not _visible(proxy, node.queue):
        return {"queue": node.queue, "id": node.id, "hidden": True}
    inside = path | {node.key}
    return {
        "queue": node.queue,
        "id": node.id,
        "name": node.name,
        "state": node.state,
        "exists": node.exists,
        "children": [_tree_json(proxy, c, inside) for c in node.children if c.key not in inside],
    }


def _dag_json(proxy: Proxy, flow: Flow) -> dict[str, Any]:
    nodes: dict[str, Any] = {}
    for key, node in flow.nodes.items():
        if _visible(proxy, node.queue):
            nodes[key] = {
                "queue": node.queue,
                "id": node.id,
                "name": node.name,
                "state": node.state,
                "exists": node.exists,
            }
        else:
            nodes[key] = {"queue": node.queue, "id": node.id, "hidden": True}
    return {
        "root": flow.root.key,
        "nodes": nodes,
        "edges": [list(e) for e in flow.edges],
        "truncated": flow.truncated,
    }


async def _flow(request: Request) -> tuple[Proxy, Flow]:
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    job_id = validate_job_id(request.path_params["job_id"], "job_id")
    flow = await (await proxy.admin.view(queue)).get_flow(job_id, max_nodes=_MAX_TREE)
    if flow is None:
        raise JobNotFoundError(queue, job_id)
    return proxy, flow


async def get_tree(request: Request) -> Response:
    """A job with its children, their children and so on (up to 1000 jobs), read by
    `Queue.get_flow`; `view=dag` answers the same jobs as `{root, nodes, edges, truncated}`."""
    view = request.query_params.get("view", "tree")
    if view not in ("tree", "dag"):
        raise ValidationError("view", "must be tree or dag")
    proxy, flow = await _flow(request)
    if view == "dag":
        return json_response(_dag_json(proxy, flow))
    return json_response(_tree_json(proxy, flow.root, frozenset()))


async def revoke_tree(request: Request) -> Response:
    """Revoke every unfinished job of the tree under a job (children first)."""
    await read_json(request)
    proxy, flow = await _flow(request)
    results: list[dict[str, Any]] = []
    done: set[str] = set()

    async def walk(node: FlowNode) -> None:
        if node.key in done:
            return
        done.add(node.key)
        if not _visible(proxy, node.queue):
            return  # nor what hangs below it: outside the allowlist
        for child in node.children:
            await walk(child)
        if not node.exists or node.state in _FINISHED:
            return
        try:
            outcome = await (await proxy.admin.view(node.queue)).revoke(node.id)
        except (JobNotFoundError, JobStateError) as exc:
            outcome = f"not revoked: {exc}"
        results.append({"queue": node.queue, "id": node.id, "outcome": outcome})

    await walk(flow.root)
    return json_response({"revoked": results})


# -- schedulers --------------------------------------------------------------------------------

_SCHEDULER_FIELDS = {
    "cron": "string",
    "every_ms": "integer",
    "tz": "string",
    "start_date": "integer",
    "end_date": "integer",
    "limit": "integer",
    "template": "object",
}


def _scheduler_name(request: Request) -> str:
    name = request.path_params["name"]
    if not name:
        raise ValidationError("name", "must be a non-empty string")
    return str(name)


async def list_schedulers(request: Request) -> Response:
    """The queue's job schedulers, the next to run first."""
    proxy = proxy_of(request)
    return json_response(
        {"schedulers": await proxy.admin.schedulers(proxy.check(request.path_params["queue"]))}
    )


async def get_scheduler(request: Request) -> Response:
    """One job scheduler."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    name = _scheduler_name(request)
    view = await proxy.admin.view(queue)
    found = next((s for s in await view.get_job_schedulers() if s.name == name), None)
    if found is None:
        return json_response({"error": "not_found", "message": f"no scheduler {name!r}"}, 404)
    return json_response(found)


async def upsert_scheduler(request: Request) -> Response:
    """Create or replace a job scheduler (`cron` or `every_ms`, and a `template`)."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    name = _scheduler_name(request)
    body = await read_json(request)
    unknown = sorted(set(body) - set(_SCHEDULER_FIELDS))
    if unknown:
        raise ValidationError(unknown[0], f"unknown; one of {', '.join(_SCHEDULER_FIELDS)}")
    async with proxy.using(queue) as q:
        return json_response(await q.upsert_job_scheduler(name, **body))


async def remove_scheduler(request: Request) -> Response:
    """Delete a job scheduler (jobs it added stay)."""
    proxy = proxy_of(request)
    queue = proxy.check(request.path_params["queue"])
    name = _scheduler_name(request)
    if not await scheduler.remove((await proxy.admin.view(queue)).ctx, name):
        return json_response({"error": "not_found", "message": f"no scheduler {name!r}"}, 404)
    return json_response({"removed": name})


_J = "/queues/{queue}/jobs/{job_id}"
_S = "/queues/{queue}/schedulers"
SPECS = [
    Spec(
        "POST",
        "/flows",
        add_flow,
        "Add a flow (tree)",
        "flows",
        {"flow": "object"},
        ("flow",),
        status=201,
    ),
    Spec(
        "POST",
        "/flows/dag",
        add_dag,
        "Add a flow (DAG)",
        "flows",
        {"nodes": "objects"},
        ("nodes",),
        status=201,
    ),
    Spec("GET", _J + "/tree", get_tree, "Read a job's tree", "flows", query={"view": "string"}),
    Spec("POST", _J + "/tree/revoke", revoke_tree, "Revoke a job's tree", "flows", {}),
    Spec("GET", _S, list_schedulers, "List job schedulers", "schedulers"),
    Spec("GET", _S + "/{name}", get_scheduler, "Get a job scheduler", "schedulers"),
    Spec(
        "PUT",
        _S + "/{name}",
        upsert_scheduler,
        "Create or replace a job scheduler",
        "schedulers",
        _SCHEDULER_FIELDS,
    ),
    Spec("DELETE", _S + "/{name}", remove_scheduler, "Remove a job scheduler", "schedulers"),
]
