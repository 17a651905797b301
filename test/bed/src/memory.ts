import { readFileSync, readdirSync } from 'node:fs';

function children(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((tid) =>
      readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number),
    );
  } catch {
    return [];
  }
}

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
  return rss(pid) + children(pid).reduce((sum, child) => sum + treeRssBytes(child), 0);
}
