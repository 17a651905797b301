import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { metric, saverSwitches } from './metric-text.js';

const TEXT = [
  '# HELP kindling_memory_saver_switches_total switches',
  '# TYPE kindling_memory_saver_switches_total counter',
  'kindling_memory_saver_switches_total{to="on",component="drainer"} 2',
  'kindling_memory_saver_switches_total{to="off",component="drainer"} 3',
  'kindling_memory_saver_on{component="drainer"} 1',
  'nodejs_heap_size_used_bytes 1.5e+7',
].join('\n');

describe('metric text', () => {
  it('when a metric has labels, it should read the first sample whatever they are', () => {
    assert.equal(metric(TEXT, 'kindling_memory_saver_on'), 1);
    assert.equal(metric(TEXT, 'nodejs_heap_size_used_bytes'), 15_000_000);
  });

  it('when labels are asked for, it should read the sample that has them among its others', () => {
    assert.equal(metric(TEXT, 'kindling_memory_saver_switches_total', { to: 'off' }), 3);
    assert.equal(saverSwitches(TEXT, 'on'), 2);
  });

  it('when the metric or the sample is absent, it should read NaN, and no switch as 0', () => {
    assert.ok(Number.isNaN(metric(TEXT, 'kindling_absent')));
    assert.ok(Number.isNaN(metric(TEXT, 'kindling_memory_saver_switches_total', { to: 'sideways' })));
    assert.equal(saverSwitches('', 'off'), 0);
  });
});
