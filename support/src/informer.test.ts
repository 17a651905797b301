import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { flush, manualClock } from '../testing/index.js';
import { ResilientInformer, type InformerEvent, type WatchRequest } from './informer.js';
import { createLogger } from './logger.js';

const cm = (rv: string, data: Record<string, string>, labels: Record<string, string> = {}): k8s.V1ConfigMap => ({
  metadata: { namespace: 'a', name: 'one', resourceVersion: rv, labels },
  data,
});

/** An informer over one object and a fake watch; `send` delivers a MODIFIED event on the open watch. */
async function fake(
  transform?: (o: k8s.V1ConfigMap) => k8s.V1ConfigMap,
  quietWhenUnchanged = true,
): Promise<{ events: InformerEvent[]; send: (o: k8s.V1ConfigMap) => Promise<void>; stop: () => Promise<void> }> {
  const events: InformerEvent[] = [];
  let open: WatchRequest | undefined;
  const informer = new ResilientInformer<k8s.V1ConfigMap>({
    kubeConfig: undefined as unknown as k8s.KubeConfig,
    path: '/api/v1/configmaps',
    list: () => Promise.resolve({ items: [cm('1', { big: 'x' })], metadata: { resourceVersion: '1' } }),
    log: createLogger({ name: 'test', level: 'silent' }),
    onEvent: (_, e) => events.push(e),
    clock: manualClock(),
    transform,
    quietWhenUnchanged,
    watch: (req) =>
      new Promise<void>((resolve) => {
        open = req;
        req.signal.addEventListener('abort', () => resolve());
      }),
  });
  await informer.start();
  await flush();
  events.length = 0;
  const send = async (o: k8s.V1ConfigMap): Promise<void> => {
    open?.onEvent('MODIFIED', o);
    await flush();
  };
  return { events, send, stop: () => informer.stop() };
}

const withoutData = (o: k8s.V1ConfigMap): k8s.V1ConfigMap => ({ metadata: o.metadata });

describe('ResilientInformer: updates of transformed objects', () => {
  it('when an update changes only what the transform drops, it should emit nothing', async () => {
    const f = await fake(withoutData);
    await f.send(cm('2', { big: 'y' }));
    assert.deepEqual(f.events, []);
    await f.stop();
  });

  it('when an update changes what the transform keeps, it should emit the update', async () => {
    const f = await fake(withoutData);
    await f.send(cm('2', { big: 'x' }, { pool: 'workers' }));
    assert.deepEqual(f.events, ['update']);
    await f.stop();
  });

  it('when the informer does not ask for quiet, it should emit an update the transform hides', async () => {
    const f = await fake(withoutData, false);
    await f.send(cm('2', { big: 'y' }));
    assert.deepEqual(f.events, ['update']);
    await f.stop();
  });

  it('when there is no transform, it should emit every new resourceVersion', async () => {
    const f = await fake();
    await f.send(cm('2', { big: 'x' }));
    assert.deepEqual(f.events, ['update']);
    await f.stop();
  });
});
