import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import pino from 'pino';
import type { Clock } from './timers.js';
import { eventBody, EventRateLimiter, recordEvent } from './events.js';

const T0 = Date.parse('2026-08-01T10:00:00Z');

function fakeClock(start: number): Clock & { advance(ms: number): void } {
  let now = start;
  return {
    now: () => now,
    setTimeout: () => undefined,
    clearTimeout: () => undefined,
    advance: (ms) => void (now += ms),
  };
}

describe('eventBody', () => {
  const pool = {
    apiVersion: 'kindling.dev/v1beta1',
    kind: 'NodePool',
    metadata: { name: 'workers', namespace: 'tenant-a', uid: 'u-1' },
  };

  it('when the subject is namespaced, it should put the Event beside it and point at it', () => {
    const e = eventBody(
      pool,
      { type: 'Warning', reason: 'ConfigMapMissing', message: 'x' },
      { component: 'kindling-x', instance: 'host-1' },
      new Date(T0),
    );
    assert.deepEqual(e.involvedObject, {
      apiVersion: 'kindling.dev/v1beta1',
      kind: 'NodePool',
      name: 'workers',
      namespace: 'tenant-a',
      uid: 'u-1',
    });
    assert.deepEqual(e.metadata, { generateName: 'workers.', namespace: 'tenant-a' });
    assert.deepEqual(
      [e.source?.component, e.reportingComponent, e.reportingInstance, e.count],
      ['kindling-x', 'kindling-x', 'host-1', 1],
    );
  });

  it('when the subject is cluster-scoped (a Node), it should put the Event in default and cut a long message', () => {
    const node = { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1', uid: 'u-2' } };
    const e = eventBody(
      node,
      { type: 'Normal', reason: 'R', message: 'm'.repeat(5000) },
      { component: 'kindling-x' },
      new Date(T0),
    );
    assert.equal(e.metadata.namespace, 'default');
    assert.equal(e.involvedObject.namespace, undefined);
    assert.equal(e.message?.length, 1024);
    assert.ok((e.reportingInstance ?? '') !== '', 'the host name when no instance is given');
  });
});

describe('recordEvent', () => {
  const event = eventBody(
    { apiVersion: 'v1', kind: 'Node', metadata: { name: 'n1' } },
    { type: 'Normal', reason: 'R', message: 'm' },
    { component: 'c' },
    new Date(T0),
  );
  const lines: string[] = [];
  const log = pino({ level: 'warn' }, { write: (l: string) => void lines.push(l) });

  it("when the create succeeds, it should say so and create it in the Event's namespace", async () => {
    const created: string[] = [];
    const core = {
      createNamespacedEvent: (req: { namespace: string }) => (created.push(req.namespace), Promise.resolve({})),
    } as unknown as k8s.CoreV1Api;
    assert.equal(await recordEvent(core, event, log), true);
    assert.deepEqual(created, ['default']);
  });

  it('when the create fails, it should log it and not throw (an Event is a courtesy)', async () => {
    const core = { createNamespacedEvent: () => Promise.reject(new Error('forbidden')) } as unknown as k8s.CoreV1Api;
    assert.equal(await recordEvent(core, event, log), false);
    assert.match(lines.join(''), /Could not record an Event/);
    assert.match(lines.join(''), /"reason":"R"/);
  });
});

describe('EventRateLimiter', () => {
  it('when the same node and budget refuse again within the interval, it should allow one Event only; after it, another', () => {
    const clock = fakeClock(T0);
    const limiter = new EventRateLimiter(clock, 300_000);
    assert.equal(limiter.allow('t/n1 shop/web'), true);
    clock.advance(1_000);
    assert.equal(limiter.allow('t/n1 shop/web'), false);
    clock.advance(298_999);
    assert.equal(limiter.allow('t/n1 shop/web'), false);
    clock.advance(1);
    assert.equal(limiter.allow('t/n1 shop/web'), true);
  });

  it('when another node or another budget refuses, it should count them apart', () => {
    const limiter = new EventRateLimiter(fakeClock(T0), 300_000);
    assert.equal(limiter.allow('t/n1 shop/web'), true);
    assert.equal(limiter.allow('t/n2 shop/web'), true);
    assert.equal(limiter.allow('t/n1 shop/db'), true);
    assert.equal(limiter.allow('t/n1 shop/web'), false);
  });
});
