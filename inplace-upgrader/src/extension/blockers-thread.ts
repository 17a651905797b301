/**
 * The thread that inspects payloads for the in-place decision (see blockers.ts): decoding and inflating a
 * payload's files is the heaviest work of a decision, and here it never holds up the main thread, which
 * renews the upgrader's Lease and answers the hooks.
 */
import { parentPort } from 'node:worker_threads';
import { inPlaceBlockers } from '../../../support/src/ignition/ignition.js';
import type { BlockersReply, BlockersRequest } from './blockers.js';

function answer(req: BlockersRequest): BlockersReply {
  try {
    return { id: req.id, blockers: inPlaceBlockers(Buffer.from(req.payload), req.maxConfigBytes) };
  } catch (err) {
    return { id: req.id, error: (err as Error).message };
  }
}

parentPort?.on('message', (req: BlockersRequest) => parentPort?.postMessage(answer(req)));
