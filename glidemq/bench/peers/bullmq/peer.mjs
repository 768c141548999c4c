// BullMQ peer for glidemq-bench. Runs one scenario against a Valkey server and prints one
// JSON object on stdout. Usage: node peer.mjs SCENARIO --port P [--host H] [--queue Q]
//   [--jobs N] [--concurrency C] [--inflight K] [--rate R] [--seconds S]
import { Queue, Worker, QueueEvents } from 'bullmq';
import { performance } from 'node:perf_hooks';
import process from 'node:process';
import { readFileSync } from 'node:fs';
import { fork } from 'node:child_process';

function parseArgs(argv) {
  const out = { host: '127.0.0.1', port: 6379, queue: 'bench-bullmq', jobs: 20000,
    concurrency: 100, inflight: 50, rate: 1000, seconds: 5, chunk: 1000, 'server-pid': 0,
    procs: 1 };
  const [scenario, ...rest] = argv;
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, '');
    if (!(key in out)) throw new Error(`unknown option --${key}`);
    out[key] = typeof out[key] === 'number' ? Number(rest[i + 1]) : rest[i + 1];
  }
  return { scenario, ...out };
}

const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };

// CPU seconds of the server process, from /proc (0 when no pid was given).
let serverPid = 0;
const serverCpu = () => {
  if (!serverPid) return 0;
  const fields = readFileSync(`/proc/${serverPid}/stat`, 'ascii').split(')').pop().trim().split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
};

async function prefill(queue, n, chunk) {
  for (let i = 0; i < n; i += chunk) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + chunk); j++) {
      batch.push({ name: 'noop', data: { i: j }, opts: { removeOnComplete: true } });
    }
    await queue.addBulk(batch);
  }
}

async function addScenario(o, conn, mode) {
  const queue = new Queue(o.queue, { connection: conn });
  await queue.obliterate({ force: true });
  const c0 = cpu();
  const s0 = serverCpu();
  const t0 = performance.now();
  if (mode === 'single') {
    for (let i = 0; i < o.jobs; i++) await queue.add('noop', { i }, { removeOnComplete: true });
  } else if (mode === 'concurrent') {
    let next = 0;
    const lane = async () => {
      while (next < o.jobs) { const i = next++; await queue.add('noop', { i }); }
    };
    await Promise.all(Array.from({ length: o.inflight }, lane));
  } else {
    await prefill(queue, o.jobs, o.chunk);
  }
  const seconds = (performance.now() - t0) / 1000;
  const clientCpu = cpu() - c0;
  const srv = serverCpu() - s0;
  await queue.obliterate({ force: true });
  await queue.close();
  return { jobs: o.jobs, seconds, client_cpu: clientCpu, server_cpu: srv };
}

async function processScenario(o, conn) {
  const queue = new Queue(o.queue, { connection: conn });
  await queue.obliterate({ force: true });
  await prefill(queue, o.jobs, o.chunk);
  let done = 0;
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const c0 = cpu();
  const s0 = serverCpu();
  const t0 = performance.now();
  const worker = new Worker(o.queue, async () => null, {
    connection: conn, concurrency: o.concurrency,
    removeOnComplete: { count: 0 },
  });
  worker.on('completed', () => { done += 1; if (done === o.jobs) finish(); });
  await finished;
  const seconds = (performance.now() - t0) / 1000;
  const clientCpu = cpu() - c0;
  const srv = serverCpu() - s0;
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  return { jobs: o.jobs, seconds, client_cpu: clientCpu, server_cpu: srv };
}

// N worker processes (forked copies of this script in 'worker' mode), like glidemq-run.
async function procsScenario(o, conn) {
  const queue = new Queue(o.queue, { connection: conn });
  await queue.obliterate({ force: true });
  await prefill(queue, o.jobs, o.chunk);
  const children = Array.from({ length: o.procs }, () => fork(new URL(import.meta.url).pathname,
    ['worker', '--host', o.host, '--port', String(o.port), '--queue', o.queue,
      '--concurrency', String(o.concurrency)], { stdio: 'ignore' }));
  // Timed from the first completion seen, so process start-up is not counted (same rule as
  // the glidemq side).
  let s0 = 0;
  let t0 = 0;
  let left0 = 0;
  for (;;) {
    const c = await queue.getJobCounts('waiting', 'active', 'prioritized');
    const left = c.waiting + c.active + c.prioritized;
    if (!t0 && left < o.jobs) { t0 = performance.now(); s0 = serverCpu(); left0 = left; }
    if (left === 0) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  const seconds = (performance.now() - t0) / 1000;
  const srv = serverCpu() - s0;
  for (const child of children) child.kill('SIGTERM');
  await queue.obliterate({ force: true });
  await queue.close();
  return { jobs: left0, seconds, client_cpu: 0, server_cpu: srv, procs: o.procs };
}

async function workerMode(o, conn) {
  const worker = new Worker(o.queue, async () => null, { connection: conn,
    concurrency: o.concurrency, removeOnComplete: { count: 0 } });
  process.on('SIGTERM', async () => { await worker.close(); process.exit(0); });
  await new Promise(() => {});
}

async function latencyScenario(o, conn) {
  const queue = new Queue(o.queue, { connection: conn });
  await queue.obliterate({ force: true });
  const latencies = [];
  const total = Math.round(o.rate * o.seconds);
  let finish;
  const finished = new Promise((resolve) => { finish = resolve; });
  const worker = new Worker(o.queue, async () => null, { connection: conn, concurrency: 10 });
  worker.on('completed', (job) => {
    latencies.push(performance.timeOrigin + performance.now() - job.data.t);
    if (latencies.length === total) finish();
  });
  await worker.waitUntilReady();
  await new Promise((r) => setTimeout(r, 200));
  const c0 = cpu();
  const s0 = serverCpu();
  const t0 = performance.now();
  for (let i = 0; i < total; i++) {
    // Open loop: each add is due at a fixed time, whether earlier ones finished or not.
    const due = t0 + (i * 1000) / o.rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    queue.add('noop', { t: performance.timeOrigin + performance.now() }, { removeOnComplete: true });
  }
  await finished;
  const seconds = (performance.now() - t0) / 1000;
  const clientCpu = cpu() - c0;
  const srv = serverCpu() - s0;
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  return { jobs: total, latencies_ms: latencies, seconds, client_cpu: clientCpu, server_cpu: srv };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const conn = { host: o.host, port: o.port, maxRetriesPerRequest: null };
  serverPid = o['server-pid'];
  let result;
  switch (o.scenario) {
    case 'add-single': result = await addScenario(o, conn, 'single'); break;
    case 'add-concurrent': result = await addScenario(o, conn, 'concurrent'); break;
    case 'add-bulk': result = await addScenario(o, conn, 'bulk'); break;
    case 'process': result = await processScenario(o, conn); break;
    case 'latency': result = await latencyScenario(o, conn); break;
    case 'procs': result = await procsScenario(o, conn); break;
    case 'worker': await workerMode(o, conn); return;
    default: throw new Error(`unknown scenario ${o.scenario}`);
  }
  result.system = 'bullmq';
  result.scenario = o.scenario;
  result.pid = process.pid;
  result.version = (await import('bullmq/package.json', { with: { type: 'json' } })).default.version;
  // Exit only once the line is flushed: a pipe write is asynchronous and exit() would cut it.
  process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(0));
}

main().catch((err) => { process.stderr.write(`${err.stack || err}\n`); process.exit(1); });
