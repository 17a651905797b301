import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { dataUrlBytes, InvalidDataUrlError } from './data-url.js';

describe('data URLs', () => {
  it('when the URL is base64 or percent-encoded, it should give its bytes', () => {
    assert.equal(dataUrlBytes('data:;base64,aGVsbG8=')?.toString(), 'hello');
    assert.equal(dataUrlBytes('data:text/plain;charset=utf-8,a%20b%0A')?.toString(), 'a b\n');
  });

  it('when the URL has another scheme, it should give nothing', () => {
    assert.equal(dataUrlBytes('https://example.invalid/x'), undefined);
  });

  it('when a percent-encoding does not decode, it should refuse it with the URL', () => {
    assert.throws(() => dataUrlBytes('data:,%E0%A4%A'), InvalidDataUrlError);
  });
});
