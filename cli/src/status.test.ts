import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { main } from './main.js';
import { statusCommand, statusScope } from './status.js';

describe('kindling status command', () => {
  const cfg = { namespace: 'tenant-a', allNamespaces: false };

  it("when a pool is named, it should show that pool, in -n's namespace unless the name carries one", () => {
    assert.deepEqual(statusScope(cfg, ['web']), { namespace: 'tenant-a', pool: 'web' });
    assert.deepEqual(statusScope({ ...cfg, allNamespaces: true }, ['tenant-b/web']), {
      namespace: 'tenant-b',
      pool: 'web',
    });
  });

  it("when no pool is named, it should show the pools of -n's namespace, or of every namespace with -A", () => {
    assert.deepEqual(statusScope(cfg, []), { namespace: 'tenant-a' });
    assert.deepEqual(statusScope({ ...cfg, allNamespaces: true }, []), {});
  });

  it('when given two pools or a malformed one, it should refuse before reading any cluster, with exit 2 and the reason', async () => {
    const err: string[] = [];
    const io = { out: () => {}, err: (t: string) => void err.push(t), env: {} };
    assert.equal(await main(['status', 'a', 'b', '--kubeconfig', '/nonexistent/kubeconfig'], io, [statusCommand]), 2);
    assert.match(err.join(''), /status takes at most one pool/);
    assert.throws(() => statusScope(cfg, ['a/b/c']), /"a\/b\/c" is not a pool: use <namespace>\/<name>/);
  });
});
