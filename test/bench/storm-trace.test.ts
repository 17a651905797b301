import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { bySecond, slowest } from './storm-trace.js';

const times = {
  arrivedMs: [10, 500, 1200, 1900, 2100],
  handshakeMs: [1, 2, 30, 3, -1],
  ttlbMs: [5, 6, 80, 7, -1],
};

describe('the storm trace', () => {
  it('when hosts arrive over three seconds, it should give a line per second with its hosts, lost ones and tails', () => {
    const lines = bySecond(times);
    assert.equal(lines.length, 3);
    assert.match(lines[0] ?? '', /s0 +2 hosts, handshake p99\/max 2\.0\/2\.0 ms, last byte 6\.0\/6\.0 ms$/);
    assert.match(lines[1] ?? '', /s1 +2 hosts, handshake p99\/max 30\.0\/30\.0 ms, last byte 80\.0\/80\.0 ms$/);
    assert.match(lines[2] ?? '', /s2 +1 hosts \(1 lost\), handshake p99\/max -\/- ms/);
  });

  it('when asked for the slowest, it should put the lost hosts first, then the slowest, each with its arrival', () => {
    assert.equal(slowest(times, 2), '2.10s: hs -1.0 last lost; 1.20s: hs 30.0 last 80.0');
  });
});
