import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Screen } from './status-watch.js';

describe('kindling status screen', () => {
  it('when stdout is a terminal, it should redraw over the last frame; otherwise print changed frames only', () => {
    const out: string[] = [];
    const tty = new Screen({ out: (t) => void out.push(t), err: () => {}, env: {}, tty: true });
    tty.draw('a\nb\n');
    tty.draw('c\nd\n');
    assert.deepEqual(out, ['a\nb\n', '\x1b[2A\r\x1b[Jc\nd\n']);
    const plain: string[] = [];
    const screen = new Screen({ out: (t) => void plain.push(t), err: () => {}, env: {} });
    screen.draw('a\n');
    screen.draw('a\n');
    screen.draw('b\n');
    assert.deepEqual(plain, ['a\n', '\nb\n']);
  });
});
