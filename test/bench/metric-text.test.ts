import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { labelValues, metric, metricSum, saverSwitches } from './metric-text.js';

const TEXT = [
  '# HELP kindling_memory_saver_switches_total switches',
  '# TYPE kindling_memory_saver_switches_total counter',
  'kindling_memory_saver_switches_total{to="on",component="drainer"} 2',
  'kindling_memory_saver_switches_total{to="off",component="drainer"} 3',
  'kindling_memory_saver_on{component="drainer"} 1',
  'nodejs_heap_size_used_bytes 1.5e+7',
  'kindling_pause_seconds{thread="1",stat="max"} 2.5e-3',
  'kindling_pause_seconds{thread="0",stat="max"} 1e-3',
  'kindling_pause_seconds{thread="0",stat="p99"} NaN',
  'kindling_pause_seconds{thread="1",stat="p99"} +Inf',
  'kindling_drift_seconds -0.5',
  'kindling_skew_seconds +1.5',
  'kindling_build_info{version="1,2",note="a \\"b\\""} 1',
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

  it('when a value has a negative exponent, a sign, NaN or an infinity, it should read it as the text format means it', () => {
    assert.equal(metric(TEXT, 'kindling_pause_seconds', { thread: '1', stat: 'max' }), 0.0025);
    assert.equal(metric(TEXT, 'kindling_drift_seconds'), -0.5);
    assert.equal(metric(TEXT, 'kindling_skew_seconds'), 1.5);
    assert.ok(Number.isNaN(metric(TEXT, 'kindling_pause_seconds', { thread: '0', stat: 'p99' })));
    assert.equal(metric(TEXT, 'kindling_pause_seconds', { stat: 'p99', thread: '1' }), Infinity);
  });

  it('when samples are summed, it should add those that have the labels, and read 0 when none has', () => {
    assert.equal(metricSum(TEXT, 'kindling_pause_seconds', { stat: 'max' }), 0.0035);
    assert.equal(metricSum(TEXT, 'kindling_pause_seconds', { thread: '0', stat: 'max' }), 0.001);
    assert.equal(metricSum(TEXT, 'kindling_absent'), 0);
  });

  it('when a label is asked for, it should list the values its samples take, each once', () => {
    assert.deepEqual(labelValues(TEXT, 'kindling_pause_seconds', 'thread'), ['1', '0']);
    assert.deepEqual(labelValues(TEXT, 'kindling_memory_saver_on', 'thread'), []);
    assert.deepEqual(labelValues(TEXT, 'kindling_build_info', 'version'), ['1,2'], 'a comma inside a value');
  });
});
