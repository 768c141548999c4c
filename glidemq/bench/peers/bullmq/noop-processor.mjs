// Sandboxed processor of the `sandbox` scenario (BullMQ runs it in a child process): does
// nothing, returns the pid of the process that ran it.
import process from 'node:process';

export default async function noop() {
  return process.pid;
}
