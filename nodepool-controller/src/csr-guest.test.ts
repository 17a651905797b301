import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { flush, manualClock } from '../../support/testing/index.js';
import { createLogger } from '../../support/src/logger.js';
import { GuestCsrs, PENDING_WINDOW_MS, PendingCap, weighBacklog, type Backlog, type PendingCsr } from './csr-guest.js';
import { KUBELET_CLIENT_SIGNER } from './csr-decision.js';
import { slimCsr } from './csr-request.js';

const NOW = Date.parse('2026-11-23T10:00:00Z');

/** `count` undecided CSRs named `<prefix>-<i>`, the first the oldest, one second apart, the last `newestAgoMs` ago. */
function pending(prefix: string, count: number, newestAgoMs = 0): PendingCsr[] {
  return Array.from({ length: count }, (_, i) => ({
    name: `${prefix}-${i}`,
    createdMs: NOW - newestAgoMs - (count - 1 - i) * 1_000,
    ignored: false,
  }));
}

const weigh = (p: readonly PendingCsr[], liveMachines: number, admitted: ReadonlySet<string> = new Set()): Backlog =>
  weighBacklog({ pending: p, liveMachines, allowance: 100, admitted, now: NOW });

/**
 * Runs the approver's loop on a guest's backlog: weigh, decide `perRound` of the CSRs the cap lets through (a
 * decision takes a CSR out of `backlog`, or marks it left for others when `ignore` says so), until nothing is
 * left to decide or `rounds` have run. Returns what each weighing changed and how many CSRs were decided.
 */
function drive(
  backlog: PendingCsr[],
  liveMachines: number,
  opts: { perRound: number; rounds: number; ignore?: (name: string) => boolean },
): { changes: string[]; decided: number; cap: PendingCap } {
  const cap = new PendingCap();
  const changes: string[] = [];
  let decided = 0;
  for (let round = 0; round < opts.rounds; round++) {
    const step = cap.weigh({ pending: backlog, liveMachines, allowance: 100, now: NOW });
    if (step.change) changes.push(step.change);
    const next = backlog.filter((p) => !p.ignored && cap.mayDecide(p.name)).slice(0, opts.perRound);
    if (next.length === 0) break;
    for (const p of next) {
      decided++;
      if (opts.ignore?.(p.name)) p.ignored = true;
      else backlog.splice(backlog.indexOf(p), 1);
    }
  }
  return { changes, decided, cap };
}

describe('weighBacklog', () => {
  it('when a pool scales up by 300 nodes at once, it should allow one pending CSR per live Machine and 100 more', () => {
    const burst = pending('join', 300);
    assert.deepEqual(weigh(burst, 300), { over: false, counted: 300, cap: 400 });
    assert.equal(weigh(burst, 0).over, true, 'the same burst without its Machines is a flood');
  });

  it('when undecided CSRs are older than the window, it should not count them', () => {
    const stale = pending('stale', 500, PENDING_WINDOW_MS + 1_000);
    assert.deepEqual(weigh([...stale, ...pending('fresh', 10)], 0), { over: false, counted: 10, cap: 100 });
  });

  it('when CSRs were left for others, it should not count them', () => {
    const others = pending('other', 500).map((p) => ({ ...p, ignored: true }));
    assert.deepEqual(weigh(others, 0), { over: false, counted: 0, cap: 100 });
  });

  it('when over the cap, it should admit its oldest CSRs, as many as the cap, and none left for others', () => {
    const old = pending('old', 3, 300_000);
    const ignored = { name: 'oldest-ignored', createdMs: NOW - 3_600_000 + 1, ignored: true };
    const backlog = weigh([...pending('new', 200), ignored, ...old], 0);
    assert.ok(backlog.over);
    assert.equal(backlog.counted, 203);
    assert.equal(backlog.admit?.length, 100);
    assert.deepEqual(backlog.admit?.slice(0, 5), ['old-0', 'old-1', 'old-2', 'new-0', 'new-1']);
  });

  it('when over the cap, it should take CSRs of one second in name order', () => {
    const same = ['b', 'c', 'a'].map((name) => ({ name, createdMs: NOW, ignored: false }));
    const backlog = weighBacklog({ pending: same, liveMachines: 0, allowance: 2, admitted: new Set(), now: NOW });
    assert.deepEqual(backlog.over && backlog.admit, ['a', 'b']);
  });

  it('when more than half of the last batch is undecided, it should admit no new batch, and at half it should', () => {
    const backlog = pending('flood', 300);
    const first = weigh(backlog, 0);
    assert.ok(first.over && first.admit);
    const admitted = new Set(first.admit);
    const again = weigh(backlog, 0, admitted);
    assert.ok(again.over);
    assert.equal(again.admit, undefined);
    const halfDecided = backlog.slice(50);
    const next = weigh(halfDecided, 0, admitted);
    assert.ok(next.over);
    assert.deepEqual(
      next.admit,
      halfDecided.slice(0, 100).map((p) => p.name),
    );
  });
});

describe('PendingCap', () => {
  it('when a legitimate burst goes over the cap, it should keep deciding its oldest CSRs and unpark once under', () => {
    // 400 kubelets whose Machines the cache does not have yet (an outage, a failover): over 0 + 100.
    const backlog = pending('join', 400);
    const { changes, decided, cap } = drive(backlog, 0, { perRound: 10, rounds: 1_000 });
    assert.deepEqual(changes, ['parked', 'unparked']);
    assert.equal(cap.parked, false);
    assert.equal(decided, 400, 'every CSR decided, the oldest first while parked');
    assert.equal(backlog.length, 0);
  });

  it('when parked, it should let only the oldest batch be decided and queue nothing else', () => {
    const cap = new PendingCap();
    const backlog = pending('join', 150);
    const step = cap.weigh({ pending: backlog, liveMachines: 0, allowance: 100, now: NOW });
    assert.equal(step.change, 'parked');
    assert.deepEqual(
      step.queue,
      backlog.slice(0, 100).map((p) => p.name),
    );
    assert.equal(cap.mayDecide('join-0'), true);
    assert.equal(cap.mayDecide('join-149'), false);
  });

  it('when a flood beyond its Machines and the allowance stays undecided, it should stay parked with one batch', () => {
    // A leaked bootstrap token: 2,000 CSRs, each waiting for its grace; 20 live Machines allow 120.
    const flood = pending('flood', 2_000);
    const cap = new PendingCap();
    const first = cap.weigh({ pending: flood, liveMachines: 20, allowance: 100, now: NOW });
    assert.equal(first.change, 'parked');
    assert.equal(first.queue.length, 120);
    for (let i = 0; i < 10; i++) {
      const again = cap.weigh({ pending: flood, liveMachines: 20, allowance: 100, now: NOW });
      assert.deepEqual(again.queue, [], 'no second batch while the first is undecided');
      assert.equal(again.change, undefined);
    }
    assert.equal(flood.filter((p) => cap.mayDecide(p.name)).length, 120);
  });

  it('when a flood is denied batch by batch, it should stay parked until under the cap, then unpark', () => {
    const backlog = pending('flood', 2_000);
    const { changes, decided } = drive(backlog, 0, { perRound: 25, rounds: 1_000 });
    assert.deepEqual(changes, ['parked', 'unparked']);
    assert.equal(decided, 2_000);
  });

  it('when a flood is of CSRs left for others, it should look at each once and unpark', () => {
    const backlog = pending('other', 2_000);
    const { changes, decided, cap } = drive(backlog, 0, { perRound: 25, rounds: 1_000, ignore: () => true });
    assert.deepEqual(changes, ['parked', 'unparked']);
    assert.equal(decided, 2_000, 'each looked at once while parked');
    assert.equal(cap.parked, false);
  });

  it('when the window passes over a parked backlog, it should unpark without a decision', () => {
    const cap = new PendingCap();
    const backlog = pending('old', 300);
    assert.equal(cap.weigh({ pending: backlog, liveMachines: 0, allowance: 100, now: NOW }).change, 'parked');
    const later = cap.weigh({ pending: backlog, liveMachines: 0, allowance: 100, now: NOW + PENDING_WINDOW_MS + 1 });
    assert.equal(later.change, 'unparked');
    assert.equal(later.queue, 'all');
  });

  it('when CSRs change many times a second, it should be weighed at most once a second', () => {
    const cap = new PendingCap();
    assert.equal(cap.changed(NOW, 1_000), 0, 'never weighed: now');
    assert.equal(cap.changed(NOW, 1_000), undefined, 'one weighing pending is enough');
    cap.weigh({ pending: [], liveMachines: 0, allowance: 100, now: NOW });
    assert.equal(cap.changed(NOW + 200, 1_000), 800, 'the rest of the second');
    assert.equal(cap.due(NOW + 200, 1_000), false, 'a decision does not weigh it sooner');
    assert.equal(cap.due(NOW + 1_000, 1_000), true);
  });
});

type Csr = k8s.V1CertificateSigningRequest;

const csr = (name: string, uid = `uid-${name}`): Csr => ({
  metadata: { name, uid, resourceVersion: '1', creationTimestamp: new Date(NOW - 1_000) },
  spec: { signerName: KUBELET_CLIENT_SIGNER, request: '', usages: ['client auth'] },
});

/**
 * A guest's CSRs over a fake CertificatesV1Api: `pages(signer)` answers each list; its watch has no cluster to
 * reach, so it fails and waits for the (manual) clock.
 */
function guest(answer: (signer: string, opts: { _continue?: string }) => k8s.V1CertificateSigningRequestList): {
  csrs: GuestCsrs;
  asked: () => number;
} {
  let asked = 0;
  const certificates = {
    listCertificateSigningRequest: (req: { fieldSelector: string; _continue?: string }) => {
      asked++;
      return Promise.resolve(answer(req.fieldSelector.replace('spec.signerName=', ''), req));
    },
  } as unknown as k8s.CertificatesV1Api;
  const csrs = new GuestCsrs({
    kubeConfig: new k8s.KubeConfig(),
    certificates,
    log: createLogger({ name: 'test', level: 'silent' }),
    clock: manualClock(NOW),
    onEvent: () => undefined,
  });
  return { csrs, asked: () => asked };
}

describe('GuestCsrs', () => {
  it('when the approver leaves a CSR for others, it should weigh it as left for others until looked at again', async () => {
    const listed = [csr('a'), csr('b')];
    const g = guest((signer) => ({ items: signer === KUBELET_CLIENT_SIGNER ? listed : [], metadata: {} }));
    await g.csrs.start();
    assert.equal(g.csrs.setIgnored(csr('a'), true), true);
    assert.equal(g.csrs.setIgnored(csr('a'), true), false, 'no change');
    assert.equal(g.csrs.setIgnored(csr('b', 'another-uid'), true), false, 'not the CSR of that name it holds');
    assert.deepEqual(
      g.csrs.pending().map((p) => [p.name, p.ignored]),
      [
        ['a', true],
        ['b', false],
      ],
    );
    assert.equal(g.csrs.setIgnored(csr('a'), false), true);
    assert.deepEqual(
      g.csrs.pending().map((p) => p.ignored),
      [false, false],
    );
    await g.csrs.stop();
  });

  it('when a guest apiserver pages without end, it should give the list up past its budget and hold nothing', async () => {
    // Slim already, as the page function would leave them: the same 16 on every page cost nothing to slim again.
    const page = Array.from({ length: 16 }, (_, i) => slimCsr(csr(`endless-${i}`)));
    let served = 0;
    const g = guest((signer) =>
      signer === KUBELET_CLIENT_SIGNER
        ? { items: page, metadata: { _continue: `after-${++served}` } }
        : { items: [], metadata: {} },
    );
    void g.csrs.start();
    await flush();
    assert.equal(g.csrs.synced, false);
    assert.equal(g.csrs.list().length, 0);
    const asked = g.asked();
    assert.equal(asked, 50_000 / 16 + 1 + 1, 'the pages of 50,000 CSRs, the one past them, the other signer');
    await flush();
    assert.equal(g.asked(), asked, 'no page asked for until the backoff has passed');
    await g.csrs.stop();
  });
});
