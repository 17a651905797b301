/**
 * The guest Nodes a CSR decision asks about, read when it is made. A decision needs only whether the Node of
 * one name exists (a bootstrap client CSR for a name a Node already has is denied; a renewal or a serving
 * request needs its Node), so the approver reads that name with one GET instead of watching every Node of
 * every guest: a Node watch delivers each heartbeat of each node to a process that acts only when a kubelet
 * asks for a certificate, a few times in a node's life. The answer is also fresh, where a cache may lag.
 *
 * decideCsr is pure and asks synchronously, so it runs once to learn the name it asks about, then again with
 * the answer.
 */
import type { Decision, DecisionInput } from './csr-decision.js';
import { decideCsr } from './csr-decision.js';

/** Whether the guest has a Node of this name (a GET: false on 404, any other failure thrown). */
export type NodeLookup = (name: string) => Promise<boolean>;

export async function decideWithNodes(
  input: Omit<DecisionInput, 'hasNode'>,
  nodeExists: NodeLookup,
  decide: (input: DecisionInput) => Decision = decideCsr,
): Promise<Decision> {
  const asked = new Set<string>();
  const first = decide({ ...input, hasNode: (name) => asked.add(name) && false });
  if (asked.size === 0) return first;
  const present = new Set<string>();
  for (const name of asked) if (await nodeExists(name)) present.add(name);
  return decide({
    ...input,
    hasNode: (name) => {
      // The decision is pure: with the same CSR it asks about the same names. A new one would be guessed.
      if (!asked.has(name)) throw new Error(`the CSR decision asked about Node "${name}" only on its second pass`);
      return present.has(name);
    },
  });
}
