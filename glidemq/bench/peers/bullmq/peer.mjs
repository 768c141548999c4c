// BullMQ peer for glidemq-bench. Runs one scenario against a Valkey server and prints one
// JSON object on stdout. Usage: node peer.mjs SCENARIO --port P [--host H] [--queue Q]
//   [--jobs N] [--concurrency C] [--inflight K] [--rate R] [--seconds S] [--batch B]
//   [--queues Q] [--url valkey://h:p1,h:p2] [--server-pid P1,P2] [--raw-out FILE]
import { Queue, Worker, QueueEvents } from 'bullmq';
import { Cluster } from 'ioredis';
import { performance } from 'node:perf_hooks';
import process from 'node:process';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { fork } from 'node:child_process';

function parseArgs(argv) {
  const out = { host: '127.0.0.1', port: 6379, queue: 'bench-bullmq', jobs: 20000,
    concurrency: 100, inflight: 50, rate: 1000, seconds: 5, chunk: 1000, 'server-pid': '',
    procs: 1, batch: 10, queues: 6, url: '', 'raw-out': '' };
  const [scenario, ...rest] = argv;
  for (let i = 0; i < rest.length; i += 2) {
    const key = rest[i].replace(/^--/, '');
    if (!(key in out)) throw new Error(`unknown option --${key}`);
    out[key] = typeof out[key] === 'number' ? Number(rest[i + 1]) : rest[i + 1];
  }
  return { scenario, ...out };
}

const cpu = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };

// CPU seconds of a process, from /proc/PID/stat (0 once it is gone).
const procCpu = (pid) => {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'ascii').split(')').pop().trim().split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch { return 0; }
};

// CPU seconds of the server process(es) (every primary of a cluster; 0 when none given).
let serverPids = [];
const serverCpu = () => serverPids.reduce((sum, pid) => sum + procCpu(pid), 0);

// CPU seconds of this process and all its live descendants (sandbox children), from /proc.
const treeCpu = () => {
  const parent = new Map();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const fields = readFileSync(`/proc/${name}/stat`, 'ascii').split(')').pop().trim().split(' ');
      parent.set(Number(name), Number(fields[1]));
    } catch { /* exited meanwhile */ }
  }
  const inTree = (pid) => {
    for (let p = pid; p > 1; p = parent.get(p) ?? 0) if (p === process.pid) return true;
    return false;
  };
  let total = 0;
  for (const pid of parent.keys()) if (inTree(pid)) total += procCpu(pid);
  return total;
};

// Per-job records (queue, job id, enqueued, started, finished, pid) from `completed` events,
// written as JSON lines when --raw-out is given.
function rawRecorder(path) {
  const rows = [];
  return {
    attach(worker) {
      if (!path) return;
      worker.on('completed', (job, result) => {
        rows.push({ queue: job.queueName, job_id: String(job.id), enqueued_ms: job.timestamp,
          started_ms: job.processedOn ?? null, finished_ms: job.finishedOn ?? Date.now(),
          pid: Number.isInteger(result) ? result : process.pid });
      });
    },
    write() {
      if (path) writeFileSync(path, rows.map((r) => JSON.stringify(r)).join('\n') + (rows.length ? '\n' : ''));
    },
  };
}

const until = (test) => new Promise((resolve) => {
  const check = () => (test() ? resolve() : setTimeout(check, 5));
  check();
});

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
  const raw = rawRecorder(o['raw-out']);
  const worker = new Worker(o.queue, async () => null, {
    connection: conn, concurrency: o.concurrency,
    removeOnComplete: { count: 0 },
  });
  raw.attach(worker);
  worker.on('completed', () => { done += 1; if (done === o.jobs) finish(); });
  await finished;
  const seconds = (performance.now() - t0) / 1000;
  const clientCpu = cpu() - c0;
  const srv = serverCpu() - s0;
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  raw.write();
  return { jobs: o.jobs, seconds, client_cpu: clientCpu, server_cpu: srv };
}

// One measured run of `processor` (a function, or a processor file run in child
// processes): prefill, start, wait for every completion. CPU includes descendants.
async function measured(o, conn, processor, opts, raw) {
  const queue = new Queue(o.queue, { connection: conn, prefix: opts.prefix });
  await prefill(queue, o.jobs, o.chunk);
  let done = 0;
  const c0 = treeCpu();
  const s0 = serverCpu();
  const t0 = performance.now();
  const worker = new Worker(o.queue, processor, { connection: conn, removeOnComplete: { count: 0 },
    ...opts });
  if (raw) raw.attach(worker);
  worker.on('completed', () => { done += 1; });
  await until(() => done >= o.jobs);
  const result = { seconds: (performance.now() - t0) / 1000, client_cpu: treeCpu() - c0,
    server_cpu: serverCpu() - s0 };
  await worker.close();
  await queue.close();
  return result;
}

// BullMQ's sandboxed processor (a file, run in child processes) against the same function
// in-process. The children are warmed by `concurrency` jobs first, as glidemq's are.
async function sandboxScenario(o, conn) {
  const queue = new Queue(o.queue, { connection: conn });
  await queue.obliterate({ force: true });
  const inproc = await measured(o, conn, async () => process.pid, { concurrency: o.concurrency });
  const file = new URL('./noop-processor.mjs', import.meta.url).pathname;
  const warm = new Worker(o.queue, file, { connection: conn, concurrency: o.concurrency,
    useWorkerThreads: false });
  await prefill(queue, o.concurrency, o.chunk);
  let warmed = 0;
  warm.on('completed', () => { warmed += 1; });
  await until(() => warmed >= o.concurrency);
  await warm.close();
  const raw = rawRecorder(o['raw-out']);
  const sandboxed = await measured(o, conn, file, { concurrency: o.concurrency,
    useWorkerThreads: false }, raw);
  raw.write();
  await queue.obliterate({ force: true });
  await queue.close();
  return { jobs: o.jobs, ...sandboxed, inprocess_seconds: inproc.seconds,
    inprocess_jobs_per_s: o.jobs / inproc.seconds, inprocess_client_cpu: inproc.client_cpu };
}

// BullMQ has no batch worker outside BullMQ Pro: a plain worker with the same number of
// jobs in flight (concurrency x batch size) stands in.
async function batchScenario(o, conn) {
  const queue = new Queue(o.queue, { connection: conn });
  await queue.obliterate({ force: true });
  const raw = rawRecorder(o['raw-out']);
  const run = await measured(o, conn, async () => null,
    { concurrency: o.concurrency * o.batch }, raw);
  raw.write();
  await queue.obliterate({ force: true });
  await queue.close();
  return { jobs: o.jobs, ...run, batch: o.batch,
    note: 'no batch worker in BullMQ (open source): plain worker, same jobs in flight' };
}

// `queues` queues on a cluster, each with its own hash-tagged prefix (so its keys share a
// slot and the queues spread over the primaries), one worker each in this process.
async function clusterScenario(o) {
  const nodes = o.url.replace(/^valkey:\/\//, '').split(',').map((hp) => {
    const [host, port] = hp.split(':');
    return { host, port: Number(port) };
  });
  const cluster = new Cluster(nodes, { redisOptions: { maxRetriesPerRequest: null },
    maxRetriesPerRequest: null });
  const per = Math.floor(o.jobs / o.queues);
  const raw = rawRecorder(o['raw-out']);
  const queues = [];
  for (let i = 0; i < o.queues; i++) {
    const queue = new Queue(`${o.queue}-${i}`, { connection: cluster, prefix: `{bq${i}}` });
    await queue.obliterate({ force: true });
    await prefill(queue, per, o.chunk);
    queues.push(queue);
  }
  let done = 0;
  const c0 = treeCpu();
  const s0 = serverCpu();
  const t0 = performance.now();
  const workers = queues.map((_, i) => {
    const worker = new Worker(`${o.queue}-${i}`, async () => process.pid, { connection: cluster,
      prefix: `{bq${i}}`, concurrency: o.concurrency, removeOnComplete: { count: 0 } });
    raw.attach(worker);
    worker.on('completed', () => { done += 1; });
    return worker;
  });
  await until(() => done >= per * o.queues);
  const seconds = (performance.now() - t0) / 1000;
  const result = { jobs: per * o.queues, seconds, client_cpu: treeCpu() - c0,
    server_cpu: serverCpu() - s0, queues: o.queues };
  await Promise.all(workers.map((w) => w.close()));
  for (const queue of queues) { await queue.obliterate({ force: true }); await queue.close(); }
  await cluster.quit();
  raw.write();
  return result;
}

// RSS of this process over `jobs` no-op jobs, sampled every 0.5 s (same rule as glidemq's).
async function memoryScenario(o, conn) {
  const queue = new Queue(o.queue, { connection: conn });
  await queue.obliterate({ force: true });
  await prefill(queue, o.jobs, o.chunk);
  const mb = () => process.memoryUsage().rss / 1048576;
  let done = 0;
  const samples = [];
  const c0 = treeCpu();
  const s0 = serverCpu();
  const t0 = performance.now();
  const start = mb();
  const worker = new Worker(o.queue, async () => null, { connection: conn,
    concurrency: o.concurrency, removeOnComplete: { count: 0 } });
  worker.on('completed', () => { done += 1; });
  while (done < o.jobs) {
    samples.push([(performance.now() - t0) / 1000, done, mb()]);
    await new Promise((r) => setTimeout(r, 500));
  }
  const seconds = (performance.now() - t0) / 1000;
  const result = { jobs: o.jobs, seconds, client_cpu: treeCpu() - c0, server_cpu: serverCpu() - s0 };
  samples.push([seconds, done, mb()]);
  await worker.close();
  await queue.obliterate({ force: true });
  await queue.close();
  const warmSample = samples.find(([, d]) => d >= Math.floor(o.jobs / 10)) ?? samples[0];
  const warm = warmSample[2];
  const end = samples[samples.length - 1][2];
  return { ...result, rss_start_mb: start, rss_warm_mb: warm, rss_end_mb: end,
    rss_peak_mb: Math.max(...samples.map((s) => s[2])), rss_growth_mb: end - warm,
    rss_flat: end - warm <= Math.max(16, 0.1 * warm),
    rss_samples: samples.map(([t, d, r]) => [Number(t.toFixed(3)), d, Number(r.toFixed(2))]) };
}

// The process run judged by CPU: server and client (with descendants) CPU us per job.
async function cpuScenario(o, conn) {
  const queue = new Queue(o.queue, { connection: conn });
  await queue.obliterate({ force: true });
  const raw = rawRecorder(o['raw-out']);
  const run = await measured(o, conn, async () => null, { concurrency: o.concurrency }, raw);
  raw.write();
  await queue.obliterate({ force: true });
  await queue.close();
  return { jobs: o.jobs, ...run,
    cpu_us_per_job: (1e6 * (run.server_cpu + run.client_cpu)) / o.jobs };
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
  serverPids = String(o['server-pid']).split(',').filter(Boolean).map(Number);
  let result;
  switch (o.scenario) {
    case 'add-single': result = await addScenario(o, conn, 'single'); break;
    case 'add-concurrent': result = await addScenario(o, conn, 'concurrent'); break;
    case 'add-bulk': result = await addScenario(o, conn, 'bulk'); break;
    case 'process': result = await processScenario(o, conn); break;
    case 'latency': result = await latencyScenario(o, conn); break;
    case 'procs': result = await procsScenario(o, conn); break;
    case 'sandbox': result = await sandboxScenario(o, conn); break;
    case 'batch': result = await batchScenario(o, conn); break;
    case 'cluster': result = await clusterScenario(o); break;
    case 'memory': result = await memoryScenario(o, conn); break;
    case 'cpu': result = await cpuScenario(o, conn); break;
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
