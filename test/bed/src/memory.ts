import { readFileSync } from 'node:fs';
import { childPids } from './process.js';

function rss(pid: number): number {
  try {
    const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/** Resident memory in bytes of a process and all its descendants (Linux /proc). */
export function treeRssBytes(pid: number): number {
  return rss(pid) + childPids(pid).reduce((sum, child) => sum + treeRssBytes(child), 0);
}
